package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/analytics"
	"github.com/sluicehq/sluice/origin/cluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Unix(1_800_000_000, 0)

// members stands in for the cluster origins of a region: AskPeers calls
// the other members' answers in process, through JSON as the RPC does,
// and leaves out a reply over cluster.MaxAnalyticsReply as the RPC does;
// members in down do not answer.
type members struct {
	answers map[string]cluster.AnalyticsAnswer
	down    map[string]bool
}

type member struct {
	id  string
	all *members
}

func (m member) ServeAnalytics(a cluster.AnalyticsAnswer) { m.all.answers[m.id] = a }

func (m member) AskPeers(ctx context.Context, req any, take func(json.RawMessage)) (answered, asked int) {
	body, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	for id, answer := range m.all.answers {
		if id == m.id {
			continue
		}
		asked++
		if m.all.down[id] {
			continue
		}
		reply, err := answer(ctx, body)
		if err != nil {
			continue
		}
		raw, err := json.Marshal(reply)
		if err != nil {
			panic(err)
		}
		if len(raw) > cluster.MaxAnalyticsReply {
			continue // the RPC would cut it and fail to decode it
		}
		answered++
		take(raw)
	}
	return answered, asked
}

func newRegion(t *testing.T, all *members, id string) *Region {
	t.Helper()
	rec, err := analytics.New(analytics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Recorder: rec, Peers: member{id: id, all: all}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRegionAnswersForEveryMember records decisions on three members and
// checks that each answers with all of them, for every interval, and with
// the others when one is down.
func TestRegionAnswersForEveryMember(t *testing.T) {
	all := &members{answers: map[string]cluster.AnalyticsAnswer{}, down: map[string]bool{}}
	nodes := []*Region{newRegion(t, all, "a"), newRegion(t, all, "b"), newRegion(t, all, "c")}
	for i, n := range nodes {
		for j := range 10 * (i + 1) { // a: 10, b: 20, c: 30 decisions, every third denied
			n.Record("ws", "api", fmt.Sprintf("on-%d", i), j%3 != 0, t0.Add(time.Duration(j)*time.Second))
		}
	}
	end := t0.Add(40 * time.Second)
	for _, iv := range []analytics.Interval{analytics.Minute, analytics.Hour, analytics.Day} {
		for i, n := range nodes {
			rep, err := n.Report("ws", "api", iv, end)
			if err != nil {
				t.Fatal(err)
			}
			if got := total(rep); got != 60 || rep.Requests != 60 || len(rep.TopRequests) != 3 || rep.TopRequests[0].Identifier != "on-2" {
				t.Fatalf("%s on node %d: %d decisions in the series, %d requests, top %+v; want 60 and on-2 first", iv, i, got, rep.Requests, rep.TopRequests)
			}
		}
	}
	all.down["c"] = true
	rep, err := nodes[0].Report("ws", "api", analytics.Minute, end)
	if err != nil {
		t.Fatal(err)
	}
	if got := total(rep); got != 30 {
		t.Fatalf("with c down: %d decisions, want a's and b's 30", got)
	}
}

func total(rep analytics.Report) uint64 {
	var n uint64
	for _, p := range rep.Series {
		n += p.Passed + p.Denied
	}
	return n
}

// TestAnswerRefusesBadRequests checks what a member answers a malformed or
// out-of-bounds request with: an error (the RPC's 400), never a panic.
func TestAnswerRefusesBadRequests(t *testing.T) {
	all := &members{answers: map[string]cluster.AnalyticsAnswer{}}
	r := newRegion(t, all, "a")
	long := string(make([]byte, maxNameBytes+1))
	for _, tc := range []struct{ name, body string }{
		{"not JSON", `{`},
		{"no namespace", `{"workspace":"ws","interval":"1m","now":1}`},
		{"a name too long", `{"workspace":"ws","namespace":"` + long + `","interval":"1m","now":1}`},
		{"an unknown interval", `{"workspace":"ws","namespace":"api","interval":"2h","now":1}`},
		{"totals of too many namespaces", `{"totals":[` + strings.Repeat(`{"Workspace":"ws","Namespace":"api"},`, maxTotalsKeys) + `{}],"now":1}`},
		{"totals of a name too long", `{"totals":[{"Workspace":"ws","Namespace":"` + long + `"}],"now":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.answer(t.Context(), []byte(tc.body)); !errors.Is(err, errInvalidRequest) {
				t.Fatalf("answer = %v, want errInvalidRequest", err)
			}
		})
	}
	got, err := r.answer(t.Context(), []byte(`{"workspace":"ws","namespace":"none","interval":"1h","now":1}`))
	var w wirePart
	if raw, ok := got.(json.RawMessage); err != nil || !ok || json.Unmarshal(raw, &w) != nil || w.Held {
		t.Fatalf("a namespace this member never saw: %s, %v; want held false", got, err)
	}
}

// TestReplyWithinCap fills every top-list sketch of a namespace (14
// buckets of each window, requests and denials) with long identifiers and
// checks that the reply to a call for its day stays within what the
// asking node reads, cluster.MaxAnalyticsReply, and that the counts the
// asking node merges from it are still upper bounds of the true counts.
func TestReplyWithinCap(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   func(i int) string
	}{
		{"8 KiB identifiers", func(i int) string { return fmt.Sprintf("%04d", i) + strings.Repeat("x", 8<<10) }},
		{"512 bytes, each escaped in 6 bytes of JSON", func(i int) string { return fmt.Sprintf("%04d", i) + strings.Repeat("<", 508) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := &members{answers: map[string]cluster.AnalyticsAnswer{}}
			a, b := newRegion(t, all, "a"), newRegion(t, all, "b")
			end := t0.Truncate(time.Hour).Add(time.Hour - time.Second)
			var times []time.Time // 7 buckets of 10 min and 7 of 10 s, within the last hour
			for k := range 7 {
				times = append(times, end.Add(-time.Duration(k)*10*time.Minute), end.Add(-time.Duration(k)*10*time.Second))
			}
			for _, at := range times {
				for i := range analytics.SketchSize {
					b.Record("ws", "api", tc.id(i), true, at)
					b.Record("ws", "api", tc.id(i), false, at)
				}
			}
			body, err := json.Marshal(request{Workspace: "ws", Namespace: "api", Interval: analytics.Day, Now: end.UnixMilli()})
			if err != nil {
				t.Fatal(err)
			}
			reply, err := b.answer(t.Context(), body)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(reply)
			if err != nil {
				t.Fatal(err)
			}
			if len(raw) > cluster.MaxAnalyticsReply {
				t.Fatalf("a reply of %d bytes, over the cap of %d", len(raw), cluster.MaxAnalyticsReply)
			}
			t.Logf("reply: %d bytes", len(raw))
			rep, err := a.Report("ws", "api", analytics.Hour, end)
			if err != nil {
				t.Fatal(err)
			}
			truth := uint64(2 * len(times)) // every identifier: a passed and a denied decision at each time
			if want := truth * analytics.SketchSize; rep.Requests != want || len(rep.TopRequests) == 0 {
				t.Fatalf("%d requests, %d listed; want b's %d and a top list", rep.Requests, len(rep.TopRequests), want)
			}
			for _, h := range rep.TopRequests {
				if h.Count < truth || h.Count-h.Error > truth {
					t.Errorf("%.12q…: count %d, error %d; the true count %d is not within", h.Identifier, h.Count, h.Error, truth)
				}
			}
		})
	}
}

// TestRegionTotals records decisions on three members and checks that each
// answers the last hour's totals of all three, with the others when one
// is down, over more namespaces than one call asks for.
func TestRegionTotals(t *testing.T) {
	all := &members{answers: map[string]cluster.AnalyticsAnswer{}, down: map[string]bool{}}
	nodes := []*Region{newRegion(t, all, "a"), newRegion(t, all, "b"), newRegion(t, all, "c")}
	keys := make([]analytics.Key, 2*maxTotalsKeys+1) // three calls
	for i := range keys {
		keys[i] = analytics.Key{Workspace: "ws", Namespace: fmt.Sprint("ns-", i)}
	}
	last := len(keys) - 1
	for i, n := range nodes {
		n.Record("ws", "ns-0", "u", true, t0)
		n.Record("ws", keys[last].Namespace, "u", i == 0, t0)
	}
	end := t0.Add(time.Minute)
	for i, n := range nodes {
		got := n.Totals(keys, end)
		if got[0] != (analytics.Counts{Passed: 3}) || got[last] != (analytics.Counts{Passed: 1, Denied: 2}) || got[1] != (analytics.Counts{}) {
			t.Fatalf("node %d: totals %+v, %+v, %+v; want 3 passed, 1 passed and 2 denied, none", i, got[0], got[last], got[1])
		}
	}
	all.down["c"] = true
	if got := nodes[0].Totals(keys[:1], end); got[0] != (analytics.Counts{Passed: 2}) {
		t.Fatalf("with c down: %+v, want a's and b's 2", got)
	}
}

// TestTotalsChunk checks how a totals call's namespaces are split: at
// most maxTotalsKeys per call, and at most maxTotalsRequest bytes of JSON
// unless a single namespace takes more.
func TestTotalsChunk(t *testing.T) {
	keys := func(n int, name string) []analytics.Key {
		out := make([]analytics.Key, n)
		for i := range out {
			out[i] = analytics.Key{Workspace: "ws", Namespace: name}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		keys  []analytics.Key
		calls []int // the namespaces of each call
	}{
		{"one", keys(1, "api"), []int{1}},
		{"by count", keys(2*maxTotalsKeys+5, "api"), []int{maxTotalsKeys, maxTotalsKeys, 5}},
		{"by bytes", keys(100, strings.Repeat("<", maxNameBytes)), []int{84, 16}}, // 3,105 bytes of JSON each
		{"one over the cap", keys(2, strings.Repeat("<", maxTotalsRequest)), []int{1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []int
			for from := 0; from < len(tc.keys); {
				to := totalsChunk(tc.keys, from)
				calls = append(calls, to-from)
				from = to
			}
			if fmt.Sprint(calls) != fmt.Sprint(tc.calls) {
				t.Fatalf("calls of %v namespaces, want %v", calls, tc.calls)
			}
		})
	}
}
