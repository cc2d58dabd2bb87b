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
		limiters[i] = l
		t.Cleanup(func() { _ = l.Close() })
	}
	ctx := context.Background()
	req := sluice.Request{Namespace: "ns", Identifier: "burst", Limit: 10, Duration: time.Hour, Cost: 1}
	awayFromCellEnd(req.Duration, 10*time.Second)
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
	// The caller's last increments may still be on their way to the owner
	// (a replay in flight): the owner broadcasts again when they land.
	seq := time.Now().UnixMilli() / time.Hour.Milliseconds()
	waitFor(t, 2*time.Second, "the owner at 10", func() bool {
		c, err := nodes[owner].o.Load(ctx, originKey(req), seq)
		return err == nil && c.Current == 10
	})
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

// TestPartitionHeals splits a 3-node cluster into {0} and {1, 2}: both sides
// keep deciding with no error, each admitting up to the limit on its own
// ring. When the partition heals, the counter's owner is seeded with the
// highest count either side saw (the max, not the sum), and every node
// denies the counter.
func TestPartitionHeals(t *testing.T) {
	nodes := newTestCluster(t, 3, "s")
	limiters := make([]*sluice.Limiter, len(nodes))
	for i, nd := range nodes {
		l, err := sluice.New(sluice.Config{Origin: nd.o})
		if err != nil {
			t.Fatal(err)
		}
		limiters[i] = l
		t.Cleanup(func() { _ = l.Close() })
	}
	addr := func(idx ...int) map[string]Member {
		var side []*testNode
		for _, i := range idx {
			side = append(side, nodes[i])
		}
		return membersOf(side...)
	}
	// Each side's gossip reaches only its side.
	sides := [][]int{{0}, {1, 2}}
	for _, side := range sides {
		for _, i := range side {
			nodes[i].o.SetPeers(addr(side...))
			nodes[i].o.setBroadcaster(func(e exceed) {
				for _, j := range side {
					if j != i {
						nodes[j].o.receive(e)
					}
				}
			})
		}
	}

	ctx := context.Background()
	req := sluice.Request{Namespace: "ns", Identifier: "split", Limit: 20, Duration: time.Hour, Cost: 1}
	awayFromCellEnd(req.Duration, 10*time.Second)
	admitted := func(l *sluice.Limiter, n int) int {
		ok := 0
		for range n {
			res, err := l.Ratelimit(ctx, req)
			if err != nil {
				t.Fatalf("a decision failed during the partition: %v", err)
			}
			if res.Success {
				ok++
			}
		}
		return ok
	}
	a, b := admitted(limiters[0], 30), admitted(limiters[1], 12)
	time.Sleep(100 * time.Millisecond) // node 1's increments reach the owner of its side
	b += admitted(limiters[2], 12)
	if a != 20 || b != 20 {
		t.Fatalf("admitted %d on one side and %d on the other, want 20 each (each side has its own ring)", a, b)
	}
	time.Sleep(100 * time.Millisecond) // the last replays

	all := addr(0, 1, 2)
	for _, nd := range nodes {
		nd.o.SetPeers(all)
	}
	key := originKey(req)
	seq := time.Now().UnixMilli() / time.Hour.Milliseconds()
	waitFor(t, 5*time.Second, "the owner seeded with 20", func() bool {
		c, err := nodes[0].o.Load(ctx, key, seq)
		return err == nil && c.Current == 20
	})
	for i, l := range limiters {
		if n := admitted(l, 5); n != 0 {
			t.Errorf("node %d admitted %d after the partition healed", i, n)
		}
	}
}

// awayFromCellEnd waits, if needed, until at least need is left of the
// current cell of d, so that a test that expects a counter's count to hold
// does not see the sliding window start to forget it.
func awayFromCellEnd(d, need time.Duration) {
	ms := d.Milliseconds()
	end := time.UnixMilli((time.Now().UnixMilli()/ms + 1) * ms)
	if time.Until(end) < need {
		time.Sleep(time.Until(end) + 100*time.Millisecond)
	}
}
