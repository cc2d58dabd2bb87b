package cluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/global"
	globalmemory "github.com/sluicehq/sluice/global/memory"
	"github.com/sluicehq/sluice/internal/drive"
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

// leaderObserver keeps whether the limiter's last global round ran on its
// region's leader.
type leaderObserver struct {
	leader atomic.Bool
}

func (*leaderObserver) OriginRead(string, time.Duration, error) {}
func (*leaderObserver) Replayed(int, time.Duration, error)      {}
func (*leaderObserver) ReplayBacklog(int64)                     {}
func (*leaderObserver) Swept(int, int)                          {}
func (*leaderObserver) Evicted(string, int)                     {}
func (*leaderObserver) Dropped(string, int, int64)              {}
func (o *leaderObserver) GlobalRound(st sluice.GlobalStats)     { o.leader.Store(st.Leader) }

// pullsSeen counts the pulls one node makes of the global store it wraps.
type pullsSeen struct {
	global.Store
	n atomic.Int64
}

func (s *pullsSeen) Pull(ctx context.Context, region string, cursor global.Cursor, now, activeFor int64) (global.Pull, error) {
	s.n.Add(1)
	return s.Store.Pull(ctx, region, cursor, now, activeFor)
}

// TestClusterRegionsShareOneLeaderEach runs two regions of three cluster
// nodes each on one global store, their rounds driven on one clock: one
// node of each region leads and pulls the store, the others never do, and
// a count spent on a node of one region (not its leader) reaches a node of
// the other through the leaders, imported at the counter's owner and read
// with a hydration there.
func TestClusterRegionsShareOneLeaderEach(t *testing.T) {
	const interval, limit, d = time.Second, 100, 10 * time.Minute
	clock := &testClock{now: time.UnixMilli(5000*d.Milliseconds() + 1000)}
	store := globalmemory.New()
	type node struct {
		l     *sluice.Limiter
		h     drive.Handle
		obs   *leaderObserver
		pulls *pullsSeen
	}
	regions := map[string][]node{}
	for _, region := range []string{"a", "b"} {
		for _, nd := range newTestClusterWith(t, 3, Config{Secret: "s", Clock: clock.Now}) {
			n := node{obs: &leaderObserver{}, pulls: &pullsSeen{Store: store}}
			l, h, err := drive.New[*sluice.Limiter](sluice.Config{Origin: nd.o, Region: region, Clock: clock.Now, Observer: n.obs,
				Global: &sluice.GlobalConfig{Store: n.pulls, Interval: interval}},
				drive.Options{GlobalTicks: make(chan time.Time), ReplayTicks: make(chan time.Time)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			n.l, n.h = l, h
			regions[region] = append(regions[region], n)
		}
	}
	ctx := context.Background()
	rounds := func(k int) {
		for range k {
			clock.advance(interval / drive.RoundsPerInterval)
			for _, r := range []string{"a", "b"} {
				for _, n := range regions[r] {
					n.h.Flush()
					_ = n.h.SyncGlobal(ctx)
				}
			}
		}
	}
	rounds(3)
	var leaders = map[string]int{}
	for r, ns := range regions {
		for i, n := range ns {
			if n.obs.leader.Load() {
				leaders[r] = i
			}
		}
	}
	spender := regions["a"][(leaders["a"]+1)%3]
	if res, err := spender.l.Ratelimit(ctx, sluice.Request{Namespace: "ns", Identifier: "far", Limit: limit, Duration: d, Cost: 60}); err != nil || !res.Success {
		t.Fatalf("spending 60 in region a: %+v, %v", res, err)
	}
	rounds(3 * drive.RoundsPerInterval)
	for r, ns := range regions {
		led := 0
		for i, n := range ns {
			if n.obs.leader.Load() {
				led++
			} else if got := n.pulls.n.Load(); got != 0 {
				t.Errorf("region %s: node %d, not its leader, pulled the store %d times", r, i, got)
			}
		}
		if led != 1 {
			t.Errorf("region %s: %d leaders, want 1", r, led)
		}
	}
	reader := regions["b"][(leaders["b"]+2)%3]
	res, err := reader.l.Ratelimit(ctx, sluice.Request{Namespace: "ns", Identifier: "far", Limit: limit, Duration: d, Cost: 41})
	if err != nil || res.Success {
		t.Errorf("41 more in region b after 60 in region a: %+v, %v; want denied (the 60 imported)", res, err)
	}
}
