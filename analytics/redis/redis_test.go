package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	mathrand "math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/analytics"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// region is one node: its recorder and its Region over the test Redis,
// under a prefix of the test's own.
type region struct {
	rec *analytics.Recorder
	*Region
}

// newRegion builds node on client under prefix.
func newRegion(t *testing.T, client goredis.UniversalClient, prefix, node string) region {
	t.Helper()
	rec, err := analytics.New(analytics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Client: client, Recorder: rec, Node: node, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return region{rec, r}
}

// testRedis returns a client of the test Redis and a key prefix unique to
// the test, whose keys are deleted when it ends.
func testRedis(t *testing.T) (*goredis.Client, string) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t)})
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "sluice:test:" + t.Name() + ":" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := c.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		_ = c.Close()
	})
	return c, prefix
}

// zipf returns n identifiers of a Zipf law over 1,000 identifiers.
func zipf(n int) []string {
	z := mathrand.NewZipf(mathrand.New(mathrand.NewPCG(3, 4)), 1.2, 1, 999)
	out := make([]string, n)
	for i := range out {
		out[i] = "user-" + strconv.FormatUint(z.Uint64(), 10)
	}
	return out
}

// TestRegionAnswers splits Zipf traffic between two nodes that publish
// through Redis: either node answers for the region, every decision
// counted once, the top 10 the true top 10 within the bound of the whole
// traffic; and publishing again (overlapping) counts nothing twice.
func TestRegionAnswers(t *testing.T) {
	client, prefix := testRedis(t)
	a, b := newRegion(t, client, prefix, "a"), newRegion(t, client, prefix, "b")
	stream := zipf(30_000)
	exact := map[string]uint64{}
	var denied uint64
	for i, id := range stream {
		now := t0.Add(time.Duration(i) * 20 * time.Millisecond) // 10 minutes
		node, passed := a, i%5 != 0
		if i%2 == 0 {
			node = b
		}
		exact[id]++
		if !passed {
			denied++
		}
		node.Record("ws", "api", id, passed, now)
		if i%3000 == 2999 { // publish every minute of traffic
			for _, n := range []region{a, b} {
				if err := n.Publish(t.Context(), now); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	end := t0.Add(10*time.Minute - time.Second)
	for _, n := range []region{a, b, a} { // a twice: a publication again changes nothing
		if err := n.Publish(t.Context(), end); err != nil {
			t.Fatal(err)
		}
	}
	for name, n := range map[string]region{"a": a, "b": b} {
		rep, err := n.Report("ws", "api", analytics.Hour, end)
		if err != nil {
			t.Fatal(err)
		}
		var p, d uint64
		for _, pt := range rep.Series {
			p, d = p+pt.Passed, d+pt.Denied
		}
		if p+d != uint64(len(stream)) || d != denied || rep.Requests != uint64(len(stream)) {
			t.Fatalf("node %s: %d passed, %d denied, window %d; want %d decisions, %d denied", name, p, d, rep.Requests, len(stream), denied)
		}
		checkTop(t, name, rep.TopRequests, exact, rep.Requests)
	}
	alone, err := a.rec.Report("ws", "api", analytics.Hour, end)
	if err != nil || alone.Requests != uint64(len(stream)/2) {
		t.Fatalf("node a's own analytics: %v, %d requests, want %d", err, alone.Requests, len(stream)/2)
	}
	if got := a.Namespaces(); len(got) != 1 || got[0] != (analytics.Key{Workspace: "ws", Namespace: "api"}) {
		t.Fatalf("namespaces %v", got)
	}
}

// TestRegionTotals checks that either node's last-hour totals add up
// both nodes' decisions of each namespace asked for, leave out a decision
// older than the hour, and count zero for a namespace nobody saw.
func TestRegionTotals(t *testing.T) {
	client, prefix := testRedis(t)
	a, b := newRegion(t, client, prefix, "a"), newRegion(t, client, prefix, "b")
	old := t0.Add(-90 * time.Minute)
	b.Record("ws", "api", "x", true, old)
	if err := b.Publish(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	for i, d := range []struct {
		n       region
		ns      string
		passed  bool
		seconds int
	}{{a, "api", true, 1}, {a, "api", false, 2}, {b, "api", true, 3}, {b, "api", false, 4}, {b, "api", false, 5}, {b, "web", true, 6}} {
		d.n.Record("ws", d.ns, strconv.Itoa(i), d.passed, t0.Add(time.Duration(d.seconds)*time.Second))
	}
	end := t0.Add(10 * time.Second)
	for _, n := range []region{a, b} {
		if err := n.Publish(t.Context(), end); err != nil {
			t.Fatal(err)
		}
	}
	keys := []analytics.Key{{Workspace: "ws", Namespace: "web"}, {Workspace: "ws", Namespace: "api"}, {Workspace: "ws", Namespace: "none"}}
	want := []analytics.Counts{{Passed: 1}, {Passed: 2, Denied: 3}, {}}
	for name, n := range map[string]region{"a": a, "b": b} {
		if got := n.Totals(keys, end); !slices.Equal(got, want) {
			t.Fatalf("node %s: totals %+v, want %+v", name, got, want)
		}
	}
	if got := a.Totals(nil, end); len(got) != 0 {
		t.Fatalf("totals of no key: %+v", got)
	}
}

// checkTop checks a top list against exact counts over a window of n.
func checkTop(t *testing.T, name string, got []analytics.Heavy, exact map[string]uint64, n uint64) {
	t.Helper()
	ids := make([]string, 0, len(exact))
	for id := range exact {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return int(exact[b]) - int(exact[a]) })
	for i, h := range got {
		f := exact[h.Identifier]
		if h.Count < f || h.Count-h.Error > f || h.Error*analytics.SketchSize > n || !slices.Contains(ids[:analytics.TopN], h.Identifier) {
			t.Fatalf("node %s #%d %s: count %d ± %d, true %d (top 10 %v)", name, i+1, h.Identifier, h.Count, h.Error, f, ids[:analytics.TopN])
		}
	}
}

// TestStaleFields checks that a node deletes the fields that left the
// windows, so that its hash stays bounded.
func TestStaleFields(t *testing.T) {
	client, prefix := testRedis(t)
	n := newRegion(t, client, prefix, "n")
	k := analytics.Key{Workspace: "ws", Namespace: "api"}
	for i := range 3 {
		now := t0.Add(time.Duration(i) * 50 * time.Minute)
		n.Record("ws", "api", "x", true, now)
		if err := n.Publish(t.Context(), now); err != nil {
			t.Fatal(err)
		}
	}
	fields, err := client.HKeys(t.Context(), n.hashKey(k, "n")).Result()
	if err != nil {
		t.Fatal(err)
	}
	first := "s" + strconv.FormatInt(t0.Unix(), 10)
	if slices.Contains(fields, first) || !slices.Contains(fields, "s"+strconv.FormatInt(t0.Add(100*time.Minute).Unix(), 10)) {
		t.Fatalf("fields after 100 minutes: %v (the second of t0 is gone, the last is there)", fields)
	}
	if ttl := client.TTL(t.Context(), n.hashKey(k, "n")).Val(); ttl <= 24*time.Hour || ttl > TTL {
		t.Fatalf("TTL %v, want about %v", ttl, TTL)
	}
}

// TestRedisDown checks that a node whose Redis is unreachable answers for
// itself and reports the failed publication.
func TestRedisDown(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	n := newRegion(t, client, "sluice:test:down:", "n")
	n.Record("ws", "api", "x", false, t0)
	if err := n.Publish(t.Context(), t0); err == nil {
		t.Fatal("publishing to an unreachable Redis succeeded")
	}
	rep, err := n.Report("ws", "api", analytics.Minute, t0)
	if err != nil || rep.Denials != 1 || len(n.Namespaces()) != 1 {
		t.Fatalf("answer without Redis: %v, %+v", err, rep.TopDenied)
	}
	if got := n.Totals([]analytics.Key{{Workspace: "ws", Namespace: "api"}}, t0); len(got) != 1 || got[0] != (analytics.Counts{Denied: 1}) {
		t.Fatalf("totals without Redis: %+v, want this node's", got)
	}
}

func TestNew(t *testing.T) {
	rec, err := analytics.New(analytics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = client.Close() })
	for _, cfg := range []Config{{Recorder: rec}, {Client: client}, {Client: client, Recorder: rec, Timeout: -1}} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

func TestCodec(t *testing.T) {
	p := analytics.Part{
		Seconds: map[int64]analytics.Counts{100: {Passed: 3, Denied: 1}},
		Minutes: map[int64]analytics.Counts{1: {Passed: 3, Denied: 1}},
		Top: map[analytics.TopKey]analytics.Summary{
			{Window: analytics.Hour, Period: 7, Denied: true}: {Total: 1, Entries: []analytics.Heavy{{Identifier: "a b\x00", Count: 1}}},
		},
	}
	f := encode(p)
	s := map[string]string{"bogus": "1", "s12": "x", "tx": "{}", "t1hq1": "{}"}
	for k, v := range f {
		s[k] = v.(string)
	}
	got := decode(s)
	if len(got.Seconds) != 1 || got.Seconds[100] != p.Seconds[100] || got.Minutes[1] != p.Minutes[1] || len(got.Top) != 1 ||
		got.Top[analytics.TopKey{Window: analytics.Hour, Period: 7, Denied: true}].Entries[0].Identifier != "a b\x00" {
		t.Fatalf("decoded %+v from %v", got, s)
	}
	for _, k := range []analytics.Key{{Workspace: "envoy rls:d", Namespace: "x}{y"}, {Workspace: "w", Namespace: "\u00e9"}} {
		if back, ok := untag(tag(k)); !ok || back != k {
			t.Fatalf("tag of %v read back as %v", k, back)
		}
	}
}
