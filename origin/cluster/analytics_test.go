package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAskPeers checks the analytics call between three members: each
// answers with what it was given, signed and checked like every peer call;
// a member that serves no analytics (404), one that refuses the request
// (400) and one that is down (503) are left out of the answers but counted
// as asked.
func TestAskPeers(t *testing.T) {
	nodes := newTestCluster(t, 4, "0123456789abcdef0123456789abcdef")
	a, b, c, d := nodes[0], nodes[1], nodes[2], nodes[3]
	b.o.ServeAnalytics(func(_ context.Context, req []byte) (any, error) {
		var q map[string]string
		if err := json.Unmarshal(req, &q); err != nil {
			return nil, err
		}
		return map[string]string{"from": b.o.ID(), "asked": q["namespace"]}, nil
	})
	c.o.ServeAnalytics(func(context.Context, []byte) (any, error) { return nil, errors.New("no such namespace") })
	d.down.Store(true)
	var got []string
	answered, asked := a.o.AskPeers(t.Context(), map[string]string{"namespace": "api"}, func(raw json.RawMessage) {
		var r map[string]string
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Errorf("reply %s: %v", raw, err)
		}
		got = append(got, r["from"]+":"+r["asked"])
	})
	if answered != 1 || asked != 3 || !slices.Equal(got, []string{b.o.ID() + ":api"}) {
		t.Fatalf("answered %d of %d: %v; want node-1 alone", answered, asked, got)
	}
	if n := a.obs.count(KindAnalytics, OutcomeOK); n != 1 {
		t.Errorf("%d analytics calls counted OK, want 1", n)
	}
}

// TestAnalyticsSpareTheBreaker has a member answer analytics calls late or
// with failures, more times than open a peer's breaker: its breaker, which
// routes the counters it owns, stays closed.
func TestAnalyticsSpareTheBreaker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(b *testNode)
	}{
		{"late", func(b *testNode) {
			b.o.ServeAnalytics(func(ctx context.Context, _ []byte) (any, error) {
				<-ctx.Done() // the caller gave up
				return nil, ctx.Err()
			})
		}},
		{"unavailable", func(b *testNode) {
			h := *b.rpc.Load()
			failing := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, string(KindAnalytics)) {
					http.Error(w, "overloaded", http.StatusServiceUnavailable)
					return
				}
				h.ServeHTTP(w, r)
			}))
			b.rpc.Store(&failing)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := newTestClusterWith(t, 2, Config{Secret: "0123456789abcdef0123456789abcdef", Timeout: 100 * time.Millisecond})
			a, b := nodes[0], nodes[1]
			tc.serve(b)
			for range 5 { // the breaker opens after 3 failures in a row
				if answered, asked := a.o.AskPeers(t.Context(), map[string]string{"namespace": "api"}, func(json.RawMessage) {}); answered != 0 || asked != 1 {
					t.Fatalf("answered %d of %d, want 0 of 1", answered, asked)
				}
			}
			if p := a.o.view.Load().peers[b.o.ID()]; !p.closed() {
				t.Fatalf("b's breaker is %v after failed analytics calls, want closed", p.breaker.State())
			}
			if n := a.obs.count(KindAnalytics, OutcomeOK); n != 0 {
				t.Errorf("%d analytics calls counted OK, want 0", n)
			}
		})
	}
}
