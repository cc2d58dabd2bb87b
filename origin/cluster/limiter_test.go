package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin"
)

// TestLimitersDenyAfterBroadcast runs a limiter on each node of a 3-node
// cluster: once the owner denies a request, every other node denies the
// counter from its merged view with no RPC at all.
func TestLimitersDenyAfterBroadcast(t *testing.T) {
	nodes := newTestCluster(t, 3, "s")
	limiters := make([]*sluice.Limiter, len(nodes))
	for i, nd := range nodes {
		l, err := sluice.New(sluice.Config{Origin: nd.o})
		if err != nil {
			t.Fatal(err)
		}
		nd.o.SetMerger(l)
		limiters[i] = l
		t.Cleanup(func() { _ = l.Close() })
	}
	ctx := context.Background()
	req := sluice.Request{Namespace: "ns", Identifier: "burst", Limit: 10, Duration: time.Minute, Cost: 1}
	owner := 0
	for i, nd := range nodes {
		if nd.o.Ring().Owner(originKey(req)) == nd.o.ID() {
			owner = i
		}
	}
	caller := (owner + 1) % len(nodes)
	admitted := 0
	for range 15 {
		res, err := limiters[caller].Ratelimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Success {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("caller admitted %d of 15, want 10", admitted)
	}
	other := 3 - owner - caller
	before := nodes[other].obs.total()
	for i := range 20 {
		res, err := limiters[other].Ratelimit(ctx, req)
		if err != nil || res.Success {
			t.Fatalf("request %d on a third node: %+v %v, want a denial", i, res, err)
		}
	}
	if rpcs := nodes[other].obs.total() - before; rpcs != 0 {
		t.Errorf("the third node sent %d RPCs for denied requests, want 0", rpcs)
	}
	if got := nodes[other].obs.got.Load(); got == 0 {
		t.Error("the third node received no broadcast")
	}
}

func originKey(r sluice.Request) origin.Key {
	return origin.Key{Workspace: r.Workspace, Namespace: r.Namespace, Identifier: r.Identifier, Duration: r.Duration}
}
