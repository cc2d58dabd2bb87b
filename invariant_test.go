package sluice

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// The invariant behind local denials: the local view of a cell never exceeds
// what the region has admitted on it. Every node's committed count of a cell
// (regional minus speculative) is at most the sum of the costs admitted on
// that cell by all the nodes of the region, whatever the interleaving of
// requests, batches that commit or roll back, replays, hydrations, refreshes
// and strict-mode decisions at the origin. Hence a request the local view
// denies would be denied by the region too (docs/consistency.md).

// invariantNodes starts n limiters on one shared origin, closed when t ends.
func invariantNodes(t interface{ Fatal(...any) }, n int, store origin.Origin, cfg Config) []*Limiter {
	nodes := make([]*Limiter, n)
	for i := range nodes {
		cfg.Origin = store
		l, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = l
	}
	return nodes
}

// TestLocalViewNeverExceedsRegion drives several limiters on one memory
// origin with random single requests, batches (some always roll back),
// reports of usage after the fact (one or two, counted whatever the
// limit: what a report counts is admitted), time steps and pauses that let replays land, and after every step checks every
// node's committed count of every cell against what the region admitted on
// it.
func TestLocalViewNeverExceedsRegion(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := &invariantRun{admitted: map[origin.Cell]int64{}}
		r.now.Store(1_700_000_000_000)
		store := memory.New(r.clock)
		refresh := rapid.SampledFrom([]time.Duration{time.Millisecond, 50 * time.Millisecond, time.Hour}).Draw(t, "RefreshAfter")
		r.nodes = invariantNodes(t, rapid.IntRange(2, 4).Draw(t, "nodes"), store,
			Config{Clock: r.clock, RefreshAfter: refresh, ReplayInterval: time.Millisecond})
		defer func() {
			for _, l := range r.nodes {
				_ = l.Close()
			}
		}()
		for step := range rapid.IntRange(1, 120).Draw(t, "steps") {
			did := r.step(t)
			r.check(t, step, did)
		}
	})
}

// invariantRun is one run of TestLocalViewNeverExceedsRegion: the nodes,
// their virtual clock, and what the region admitted in each cell.
type invariantRun struct {
	nodes    []*Limiter
	now      atomic.Int64 // Unix ms
	admitted map[origin.Cell]int64
}

func (r *invariantRun) clock() time.Time { return time.UnixMilli(r.now.Load()) }

// draw draws a request at the run's time; label prefixes its draws' names.
func (r *invariantRun) draw(t *rapid.T, label string) Request {
	limit := rapid.SampledFrom([]int64{0, 1, 3, 10}).Draw(t, label+"limit")
	return Request{
		Namespace:  "inv",
		Identifier: rapid.SampledFrom([]string{"a", "b"}).Draw(t, label+"id"),
		Limit:      limit,
		Duration:   rapid.SampledFrom([]time.Duration{100 * time.Millisecond, time.Second}).Draw(t, label+"duration"),
		Cost:       rapid.Int64Range(0, 3).Draw(t, label+"cost"),
		Time:       r.clock(),
	}
}

// count adds the costs of the admitted requests rs to their cells.
func (r *invariantRun) count(t *rapid.T, rs ...Request) {
	for _, req := range rs {
		var q resolved
		if err := resolve(&q, &req, nil); err != nil { // req.Time is set
			t.Fatal(err)
		}
		r.admitted[q.current()] += req.Cost
	}
}

// step draws and takes one action: a request, a batch, reports, time going
// by or a pause for the replays; it returns what it did.
func (r *invariantRun) step(t *rapid.T) string {
	draw := func(label string) Request { return r.draw(t, label) }
	switch rapid.IntRange(0, 11).Draw(t, "action") {
	case 0, 1, 2, 3:
		req := r.draw(t, "")
		node := rapid.IntRange(0, len(r.nodes)-1).Draw(t, "node")
		res, err := r.nodes[node].Ratelimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Success {
			r.count(t, req)
		}
		return fmt.Sprintf("node %d: %+v -> %v", node, req, res.Success)
	case 4, 5:
		rs, did := invariantBatch(t, r.nodes, draw, false)
		r.count(t, rs...)
		return did
	case 6, 7:
		step := rapid.SampledFrom([]int64{1, 10, 99, 100, 400, 1000}).Draw(t, "ms")
		r.now.Add(step)
		return fmt.Sprintf("time +%d ms", step)
	case 8:
		time.Sleep(3 * time.Millisecond) // replays land and merge back
		return "pause"
	case 10, 11: // usage after the fact: counted whatever the limit
		rs, did := invariantBatch(t, r.nodes, draw, true)
		r.count(t, rs...)
		return did
	default:
		return "nothing"
	}
}

// check fails t if a node holds more committed in a cell than the region
// admitted there.
func (r *invariantRun) check(t *rapid.T, step int, did string) {
	for cell, total := range r.admitted {
		for i, l := range r.nodes {
			c := l.cells.load(l.cells.keyHash(&cell.Key), &cell)
			if c == nil {
				continue
			}
			if local := c.committed(); local > total {
				t.Fatalf("step %d (%s): node %d holds %d committed on %v/%d, the region admitted %d",
					step, did, i, local, cell.Identifier, cell.Sequence, total)
			}
		}
	}
}

// invariantBatch sends a batch of requests drawn with draw to a node drawn
// from nodes and returns the requests the region admitted, and what it
// did. A batch of RatelimitMany (report false) may hold a request no limit
// admits, so that it rolls back: then none is admitted. A batch of
// ReportMany (report true) holds one or two reports, and every one counts.
func invariantBatch(t *rapid.T, nodes []*Limiter, draw func(string) Request, report bool) ([]Request, string) {
	ctx := context.Background()
	if report {
		rs := []Request{draw("report ")}
		if rapid.Bool().Draw(t, "report batch") {
			rs = append(rs, draw("report "))
		}
		node := rapid.IntRange(0, len(nodes)-1).Draw(t, "node")
		if _, err := nodes[node].ReportMany(ctx, rs); err != nil {
			t.Fatal(err)
		}
		return rs, fmt.Sprintf("node %d: %d reports", node, len(rs))
	}
	rs := make([]Request, rapid.IntRange(1, 3).Draw(t, "batch size"))
	for i := range rs {
		rs[i] = draw("batch ")
	}
	if rapid.Bool().Draw(t, "roll back") { // a request no limit admits
		rs = append(rs, Request{Namespace: "inv", Identifier: "closed", Limit: 0, Duration: time.Second, Cost: 1, Time: rs[0].Time})
	}
	node := rapid.IntRange(0, len(nodes)-1).Draw(t, "node")
	out, err := nodes[node].RatelimitMany(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	all := true
	for _, o := range out {
		all = all && o.Success
	}
	did := fmt.Sprintf("node %d: batch of %d -> %v", node, len(rs), all)
	if !all {
		return nil, did
	}
	return rs, did
}

// TestLocalViewNeverExceedsRegionConcurrently runs the same invariant with
// concurrent callers on three limiters, while a checker reads every node's
// committed count under the cell's lock. A caller adds its costs to inFlight
// before its call and moves what passed to admitted after it, so at any
// instant inFlight + admitted bounds what the region has really admitted,
// plus the units the origin admitted to batches' reservations that were
// withdrawn since (withdrawals.units): a node that read the cell while such
// a reservation was held counts it still (see
// TestReadOfAWithdrawnReservationCounts). The checker reads the local count
// first, then inFlight, admitted and the withdrawn units, which can only
// overstate the bound. Besides the limiters' own hydrations, refreshes and
// replays, one goroutine per node merges the origin's total into its cell
// all the time.
func TestLocalViewNeverExceedsRegionConcurrently(t *testing.T) {
	if testing.Short() {
		t.Skip("concurrent stress")
	}
	store := memory.New(nil)
	c := &concurrentRun{withdrawals: &withdrawCounter{Store: store}}
	c.nodes = invariantNodes(t, 3, c.withdrawals, Config{RefreshAfter: 5 * time.Millisecond, ReplayInterval: time.Millisecond})
	defer func() {
		for _, l := range c.nodes {
			_ = l.Close()
		}
	}()
	c.base = Request{Namespace: "inv", Identifier: "hot", Duration: time.Hour, Time: time.UnixMilli(1_700_000_000_000)}
	var q resolved
	if err := resolve(&q, &c.base, nil); err != nil {
		t.Fatal(err)
	}
	c.cell = q.current()
	stop := make(chan struct{})
	var checker sync.WaitGroup
	checker.Go(func() { c.checkUntil(t, stop) })
	// Origin reads besides the limiters' own: each node merges the origin's
	// total into its cell all the time, as a hydration, refresh or replay
	// does.
	for _, l := range c.nodes {
		checker.Go(func() { c.mergeUntil(l, store, stop) })
	}
	var callers sync.WaitGroup
	for w := range 6 {
		callers.Go(func() { c.call(c.nodes[w%len(c.nodes)], rand.New(rand.NewPCG(uint64(w), 11)), 1500) })
	}
	callers.Wait()
	close(stop)
	checker.Wait()
	t.Logf("admitted %d units, %d withdrawn from reservations; %d violations", c.admitted.Load(), c.withdrawals.units.Load(), c.violations.Load())
}

// concurrentRun is TestLocalViewNeverExceedsRegionConcurrently's state:
// the nodes, the one cell every request goes to, and the units in flight
// and admitted, which bound what any node may hold committed.
type concurrentRun struct {
	nodes                          []*Limiter
	withdrawals                    *withdrawCounter
	base                           Request
	cell                           origin.Cell
	inFlight, admitted, violations atomic.Int64
	first                          sync.Once
}

// checkUntil reads every node's committed count, then the bound, until
// stop is closed, and reports the first violation.
func (c *concurrentRun) checkUntil(t *testing.T, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		for i, l := range c.nodes {
			cl := l.cells.load(l.cells.keyHash(&c.cell.Key), &c.cell)
			if cl == nil {
				continue
			}
			local := cl.committed()
			bound := c.inFlight.Load() + c.admitted.Load() + c.withdrawals.units.Load()
			if local > bound {
				c.violations.Add(1)
				c.first.Do(func() { t.Errorf("node %d holds %d committed, the region admitted at most %d", i, local, bound) })
			}
		}
	}
}

// mergeUntil merges the origin's total of the cell into l's cell until
// stop is closed.
func (c *concurrentRun) mergeUntil(l *Limiter, store *memory.Store, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		if cl := l.cells.load(l.cells.keyHash(&c.cell.Key), &c.cell); cl != nil {
			counts, _ := store.Load(context.Background(), c.cell.Key, c.cell.Sequence)
			cl.mergeRead(counts.Current)
		}
	}
}

// call sends n calls to l: single requests, batches of two, and batches
// that roll back, counting their costs in flight during the call and as
// admitted after it.
func (c *concurrentRun) call(l *Limiter, rng *rand.Rand, n int) {
	ctx := context.Background()
	for range n {
		r := c.base
		r.Limit = []int64{200, 400, 600}[rng.IntN(3)]
		r.Cost = 1 + rng.Int64N(3)
		switch rng.IntN(3) {
		case 0:
			c.inFlight.Add(r.Cost)
			res, _ := l.Ratelimit(ctx, r)
			if res.Success {
				c.admitted.Add(r.Cost)
			}
			c.inFlight.Add(-r.Cost)
		case 1:
			c.inFlight.Add(2 * r.Cost)
			out, _ := l.RatelimitMany(ctx, []Request{r, r})
			if out[0].Success && out[1].Success {
				c.admitted.Add(2 * r.Cost)
			}
			c.inFlight.Add(-2 * r.Cost)
		default: // rolls back: admits nothing
			never := c.base
			never.Identifier, never.Limit, never.Cost = "closed", 0, 1
			c.inFlight.Add(r.Cost)
			_, _ = l.RatelimitMany(ctx, []Request{r, never})
			c.inFlight.Add(-r.Cost)
		}
	}
}

// withdrawCounter is a memory origin that counts the units it admitted to
// reservations (a Decide with a holder) that were withdrawn since: each
// holder's admitted costs join units as its withdrawal starts, before the
// origin takes them out of the total.
type withdrawCounter struct {
	*memory.Store
	mu    sync.Mutex
	held  map[origin.Writer]int64 // admitted units of each holder
	units atomic.Int64
}

// Decide implements origin.Origin and notes a holder's admitted units.
func (w *withdrawCounter) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	v, err := w.Store.Decide(ctx, c)
	if err != nil || c.Holder == 0 {
		return v, err
	}
	var units int64
	for i, ok := range v.Admitted {
		if ok {
			units += c.Asks[i].Cost
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held == nil {
		w.held = map[origin.Writer]int64{}
	}
	w.held[c.Holder] += units
	return v, nil
}

// Withdraw implements origin.Origin and counts the holder's units as
// withdrawn, once.
func (w *withdrawCounter) Withdraw(ctx context.Context, c origin.Cell, holder origin.Writer) error {
	w.mu.Lock()
	w.units.Add(w.held[holder])
	delete(w.held, holder)
	w.mu.Unlock()
	return w.Store.Withdraw(ctx, c, holder)
}

// withdrawGate is a memory origin whose Withdraw waits, before it runs,
// for release, once it has said so on reached.
type withdrawGate struct {
	*memory.Store
	once             sync.Once
	reached, release chan struct{}
}

// Withdraw implements origin.Origin.
func (g *withdrawGate) Withdraw(ctx context.Context, c origin.Cell, holder origin.Writer) error {
	g.once.Do(func() { close(g.reached) })
	<-g.release
	return g.Store.Withdraw(ctx, c, holder)
}

// TestReadOfAWithdrawnReservationCounts pins the one way a node's count
// can exceed what its region admitted: a node that reads a cell while
// another node's batch holds a reservation there counts the reserved
// units, and keeps counting them after the batch is rolled back and the
// reservation withdrawn (a count merges up, never down), until the cell
// ends. It errs towards denying, by at most the units withdrawn meanwhile.
func TestReadOfAWithdrawnReservationCounts(t *testing.T) {
	store := memory.New(nil)
	at := time.Now() // the limiters replay only cells that have not ended by their clock
	gate := &withdrawGate{Store: store, reached: make(chan struct{}), release: make(chan struct{})}
	cfg := Config{RefreshAfter: time.Hour}
	reader, batcher := invariantNodes(t, 1, store, cfg)[0], invariantNodes(t, 1, gate, cfg)[0]
	defer func() {
		for _, l := range []*Limiter{reader, batcher} {
			_ = l.Close()
		}
	}()
	ctx := context.Background()
	r := Request{Namespace: "inv", Identifier: "hot", Limit: 10, Cost: 1, Duration: time.Hour, Time: at}
	hydrate := r
	hydrate.Cost = 0
	fill := func(n int) { // n units admitted by a node that then closes: they reach the origin
		filler := invariantNodes(t, 1, store, cfg)[0]
		for range n {
			if res, err := filler.Ratelimit(ctx, r); err != nil || !res.Success {
				t.Fatalf("filler: %+v, %v", res, err)
			}
		}
		if err := filler.Close(); err != nil {
			t.Fatal(err)
		}
	}
	fill(8)
	if _, err := batcher.Ratelimit(ctx, hydrate); err != nil { // the batcher sees 8
		t.Fatal(err)
	}
	fill(1)
	if _, err := reader.Ratelimit(ctx, hydrate); err != nil { // the reader sees 9
		t.Fatal(err)
	}
	done := make(chan []Response, 1)
	go func() {
		// Both pass the batcher's view of 8, near the limit: the origin
		// decides, admits the 10th unit, denies the 11th.
		out, err := batcher.RatelimitMany(ctx, []Request{r, r})
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	select {
	case <-gate.reached: // the batch is rolled back; its reservation is still held at the origin
	case out := <-done:
		t.Fatalf("batch answered %+v without withdrawing a reservation", out)
	}
	var q resolved
	if err := resolve(&q, &r, nil); err != nil {
		t.Fatal(err)
	}
	cell := q.current()
	c := reader.cells.load(reader.cells.keyHash(&cell.Key), &cell)
	counts, err := store.Load(ctx, cell.Key, cell.Sequence)
	if err != nil || c == nil {
		t.Fatalf("reader's cell %v, load %v", c, err)
	}
	c.mergeRead(counts.Current) // a refresh of the reader's
	close(gate.release)
	if out := <-done; out[1].Success {
		t.Fatalf("batch %+v, want the second request denied and the batch rolled back", out)
	}
	after, err := store.Load(ctx, cell.Key, cell.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	c.mergeRead(after.Current) // a later refresh: the count does not come down
	if after.Current != 9 || c.committed() != 10 {
		t.Fatalf("origin %d, reader %d: want 9 admitted and the reader counting the withdrawn unit, 10", after.Current, c.committed())
	}
}
