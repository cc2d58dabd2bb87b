package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
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
