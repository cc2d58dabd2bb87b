package sluice_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/global"
	globalmemory "github.com/sluicehq/sluice/global/memory"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin/memory"
)

// leaderSeen keeps whether the last global round ran on the region's leader.
type leaderSeen struct {
	ignoring
	leader bool
	rounds int
}

func (o *leaderSeen) GlobalRound(st sluice.GlobalStats) { o.leader, o.rounds = st.Leader, o.rounds+1 }

// leaderRig is region a's two nodes, a1 and a2, on one origin and region
// b beside them, on a driven clock: each node with its own global store
// (the same store, or wrappers of it) and its own leaderSeen.
type leaderRig struct {
	a1, a2, b drivenNode
	seen      [3]*leaderSeen
	clock     *virtualClock
	interval  time.Duration
}

// newLeaderRig starts a leaderRig whose nodes a1, a2 and b use stores[0],
// stores[1] and stores[2], a round every third of interval.
func newLeaderRig(t *testing.T, interval time.Duration, stores [3]global.Store) *leaderRig {
	t.Helper()
	r := &leaderRig{clock: &virtualClock{}, interval: interval, seen: [3]*leaderSeen{{}, {}, {}}}
	r.clock.set(5000*(10*time.Minute).Milliseconds() + 1000)
	shared := memory.New(r.clock.now)
	var nodes [3]drivenNode
	for i, region := range []string{"a", "a", "b"} {
		cfg := sluice.Config{Region: region, Clock: r.clock.now, Observer: r.seen[i],
			Global: &sluice.GlobalConfig{Store: stores[i], Interval: interval}}
		if region == "a" {
			cfg.Origin = shared
		}
		l, h := newDriven(t, cfg, drive.Options{GlobalTicks: make(chan time.Time), ReplayTicks: make(chan time.Time)})
		nodes[i] = drivenNode{l, h}
	}
	r.a1, r.a2, r.b = nodes[0], nodes[1], nodes[2]
	return r
}

// rounds runs n rounds on the nodes ns, the clock moving a round ahead
// before each.
func (r *leaderRig) rounds(n int, ns ...drivenNode) {
	for range n {
		r.clock.advance(r.interval / drive.RoundsPerInterval)
		for _, x := range ns {
			_ = x.SyncGlobal(context.Background())
		}
	}
}

// TestLeaderFailsOver runs region a's two nodes on one origin and region b
// beside them, a round every third of an interval. Only a1, which took the
// lease first, runs a's rounds and talks to the store. Then a1 stalls (it
// runs no more rounds): a2 takes over within two intervals, carries on from
// the cursors a1 stored, and b keeps seeing a's counts, each written once.
func TestLeaderFailsOver(t *testing.T) {
	const interval, limit, d = time.Second, 100, 10 * time.Minute
	store := &rowsByRegion{Store: globalmemory.New(), rows: map[string]int{}}
	r := newLeaderRig(t, interval, [3]global.Store{store, store, store})
	a1, a2, b, seen := r.a1, r.a2, r.b, r.seen
	ctx := context.Background()
	round := func(ns ...drivenNode) { r.rounds(1, ns...) }
	round(a1, a2, b)
	if !seen[0].leader || seen[1].leader || !seen[2].leader {
		t.Fatalf("leaders after the first round: a1 %v, a2 %v, b %v; want a1 and b", seen[0].leader, seen[1].leader, seen[2].leader)
	}
	spend := func(n drivenNode, cost int64) {
		t.Helper()
		if res, _ := n.Ratelimit(ctx, req("busy", limit, cost, d, time.Time{})); !res.Success {
			t.Fatalf("denied %d", cost)
		}
		n.Flush()
	}
	spend(a2, 60)
	round(a1, a2, b)
	round(a1, a2, b)
	if res, _ := b.Ratelimit(ctx, req("busy", limit, 0, d, time.Time{})); res.Current != 60 || store.of("a") != 1 {
		t.Fatalf("before the stall: b sees %d, a wrote %d rows; want 60 and 1", res.Current, store.of("a"))
	}
	for i := range 2 * drive.RoundsPerInterval { // a1 stalls for two intervals
		round(a2, b)
		if seen[1].leader {
			t.Logf("a2 took over %d rounds (%v) after a1's last", i+1, time.Duration(i+1)*interval/drive.RoundsPerInterval)
			break
		}
	}
	if !seen[1].leader {
		t.Fatal("a2 did not take over within two intervals of a1's last round")
	}
	spend(a2, 20)
	round(a2, b)
	round(a2, b)
	if res, _ := b.Ratelimit(ctx, req("busy", limit, 0, d, time.Time{})); res.Current != 80 || store.of("a") != 2 {
		t.Fatalf("after the failover: b sees %d, a wrote %d rows; want 80 and 2 (nothing written twice)", res.Current, store.of("a"))
	}
	a1Rounds := seen[0].rounds
	round(a1, a2, b) // a1 comes back: it has lost the lease and runs no round of a's
	if seen[0].leader || !seen[1].leader || seen[0].rounds != a1Rounds+1 {
		t.Fatalf("a1 back: leader %v, a2 leader %v; want a2 alone", seen[0].leader, seen[1].leader)
	}
}

// TestLeaderHandsBackWhatItTook: region a's leader a1 takes a count a2
// nominated and cannot write it (its store fails), then stalls; a2 takes
// the lease. When a1 comes back and learns it lost the lease, it hands the
// count back as a nomination, a2 writes it, once, and region b sees it. (a2
// nominates a count once: without the hand-back, b would not see it until
// it grew.)
func TestLeaderHandsBackWhatItTook(t *testing.T) {
	const interval, limit, d = time.Second, 100, 10 * time.Minute
	store := &rowsByRegion{Store: globalmemory.New(), rows: map[string]int{}}
	a1Store := &heldPublishes{Store: store}
	r := newLeaderRig(t, interval, [3]global.Store{a1Store, store, store})
	a1, a2, b, seen := r.a1, r.a2, r.b, r.seen
	ctx := context.Background()
	round := func(ns ...drivenNode) { r.rounds(1, ns...) }
	seenByB := func() int64 {
		t.Helper()
		res, _ := b.Ratelimit(ctx, req("busy", limit, 0, d, time.Time{}))
		return res.Current
	}
	round(a1, a2, b)
	if !seen[0].leader {
		t.Fatal("a1 does not lead after the first round")
	}
	a1Store.on.Store(true)
	if res, _ := a2.Ratelimit(ctx, req("busy", limit, 60, d, time.Time{})); !res.Success {
		t.Fatal("denied 60")
	}
	a2.Flush()
	for range 3 { // a2 nominates the count; a1 takes it and fails to write it
		round(a1, a2, b)
	}
	if n := store.of("a"); n != 0 || seenByB() != 0 {
		t.Fatalf("a wrote %d rows and b sees %d while a1's store fails; want none", n, seenByB())
	}
	for range 2 * drive.RoundsPerInterval { // a1 stalls
		round(a2, b)
		if seen[1].leader {
			break
		}
	}
	if !seen[1].leader {
		t.Fatal("a2 did not take over within two intervals")
	}
	for range 3 { // a1 comes back: it hands the count back, a2 writes it
		round(a1, a2, b)
	}
	if got, n := seenByB(), store.of("a"); got != 60 || n != 1 {
		t.Fatalf("after the hand-back: b sees %d, a wrote %d rows; want 60 and 1", got, n)
	}
}

// pullSpy is a global store that records the cursor of each Pull and the
// cursor each returned.
type pullSpy struct {
	global.Store
	from, next []global.Cursor
}

func (s *pullSpy) PullWithDenials(ctx context.Context, region string, cursor, denialCursor global.Cursor, now, activeFor int64) (global.Pull, []global.Denial, global.Cursor, error) {
	p, ds, dc, err := s.Store.(global.PullerWithDenials).PullWithDenials(ctx, region, cursor, denialCursor, now, activeFor)
	s.from, s.next = append(s.from, cursor), append(s.next, p.Next)
	return p, ds, dc, err
}

// TestLeaderTakesTheLeaseCursors: a node that takes its region's lease back
// after another node held it (the fence changed) goes on from the cursors
// the other stored in the lease, not from its own (it fails if lead keeps
// them).
func TestLeaderTakesTheLeaseCursors(t *testing.T) {
	const interval, d = time.Second, 10 * time.Minute
	store := globalmemory.New()
	spies := []*pullSpy{{Store: store}, {Store: store}}
	r := newLeaderRig(t, interval, [3]global.Store{spies[0], spies[1], store})
	nodes, other := []drivenNode{r.a1, r.a2}, r.b
	ctx := context.Background()
	rounds := r.rounds
	write := func() { // region b spends a fifth of a limit: it publishes, and cursors move
		t.Helper()
		if res, _ := other.Ratelimit(ctx, req("moving", 1000, 200, d, time.Time{})); !res.Success {
			t.Fatal("b denied")
		}
		other.Flush()
	}
	rounds(2, nodes[0], nodes[1], other)               // a1 leads
	rounds(3*drive.RoundsPerInterval, nodes[1], other) // a1 stalls: a2 takes over
	for range 4 {
		write()
		rounds(1, nodes[1], other) // a2 pulls: its cursor moves on
	}
	if len(spies[1].next) == 0 {
		t.Fatal("a2 never pulled")
	}
	// A round renews the lease, storing the cursor of the round before,
	// then pulls: the lease holds the cursor of a2's last pull but one.
	stored := spies[1].next[len(spies[1].next)-2]
	a1Pulls := len(spies[0].from)
	if own := spies[0].next[a1Pulls-1]; own == stored {
		t.Fatalf("a2's cursor %d did not move past a1's", stored)
	}
	rounds(3*drive.RoundsPerInterval, nodes[0], other) // a2 stalls: a1 takes the lease back
	if len(spies[0].from) == a1Pulls {
		t.Fatal("a1 did not pull again after taking the lease back")
	}
	if from := spies[0].from[a1Pulls]; from != stored {
		t.Fatalf("a1's first pull after taking the lease back is from %d, want a2's stored cursor %d (a1's own was %d)",
			from, stored, spies[0].next[a1Pulls-1])
	}
}

// cleanupsSeen counts the cleanups run on the store it wraps.
type cleanupsSeen struct {
	global.Store
	n atomic.Int64
}

func (s *cleanupsSeen) Cleanup(ctx context.Context, now int64, batch int) (int, error) {
	s.n.Add(1)
	return s.Store.Cleanup(ctx, now, batch)
}

// TestCleanupKeepsTheClocksSchedule: region a's leader a1 stalls before
// its first cleanup is due and a2 takes over. The cleanups keep the clock's
// schedule, one after each multiple of CleanupEvery intervals whichever
// node leads, rather than starting again with the new leader (which would
// skip one, and under leaders that change faster than the period, all).
func TestCleanupKeepsTheClocksSchedule(t *testing.T) {
	const interval = time.Second
	shared := globalmemory.New()
	a := &cleanupsSeen{Store: shared}
	r := newLeaderRig(t, interval, [3]global.Store{a, a, shared})
	const period = 12 * interval // CleanupEvery's default
	start := r.clock.now()
	untilPeriods := func(k float64, ns ...drivenNode) {
		for r.clock.now().Sub(start) < time.Duration(k*float64(period)) {
			r.rounds(1, ns...)
		}
	}
	untilPeriods(0.6, r.a1, r.a2, r.b) // a1 leads
	if !r.seen[0].leader {
		t.Fatal("a1 does not lead")
	}
	untilPeriods(1.5, r.a2, r.b) // a1 stalls: a2 takes over and crosses a boundary
	if !r.seen[1].leader {
		t.Fatal("a2 did not take over")
	}
	if got := a.n.Load(); got != 1 {
		t.Fatalf("%d cleanups by region a in its first 1.5 periods (a leader change within the first); want 1", got)
	}
	untilPeriods(3.5, r.a2, r.b)
	if got := a.n.Load(); got != 3 {
		t.Fatalf("%d cleanups by region a in 3.5 periods; want 3", got)
	}
}

// TestLeaderSeesImportsAtOnce: region a's leader a1 holds a counter when
// region b spends on it. The round that imports b's count into a's origin
// also raises a1's own view of it, with no replay or read of a1's: the
// leader's counters see the other regions' counts a round after they are
// published. a2, which runs no rounds of a's, learns them from the origin
// with its next read.
func TestLeaderSeesImportsAtOnce(t *testing.T) {
	const interval, limit, d = time.Second, 100, 10 * time.Minute
	store := globalmemory.New()
	r := newLeaderRig(t, interval, [3]global.Store{store, store, store})
	a1, b := r.a1, r.b
	ctx := context.Background()
	r.rounds(1, r.a1, r.a2, r.b)
	if !r.seen[0].leader {
		t.Fatal("a1 does not lead region a")
	}
	if res, _ := a1.Ratelimit(ctx, req("busy", limit, 10, d, time.Time{})); !res.Success {
		t.Fatal("a1 denied its first 10")
	}
	a1.Flush()
	if res, _ := b.Ratelimit(ctx, req("busy", limit, 60, d, time.Time{})); !res.Success {
		t.Fatal("b denied its 60")
	}
	b.Flush()
	r.rounds(2, r.a1, r.a2, r.b)
	if res, _ := a1.Ratelimit(ctx, req("busy", limit, 0, d, time.Time{})); res.Current != 70 {
		t.Fatalf("a1 sees %d after b's count was imported, want 70 (its 10 and b's 60)", res.Current)
	}
	if res, _ := r.a2.Ratelimit(ctx, req("busy", limit, 0, d, time.Time{})); res.Current != 70 {
		t.Fatalf("a2 reads %d from the origin, want 70", res.Current)
	}
}
