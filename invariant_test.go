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
// denies would be denied by the region too (docs/explanation/consistency.md).

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
		var now atomic.Int64
		now.Store(1_700_000_000_000)
		clock := func() time.Time { return time.UnixMilli(now.Load()) }
		store := memory.New(clock)
		refresh := rapid.SampledFrom([]time.Duration{time.Millisecond, 50 * time.Millisecond, time.Hour}).Draw(t, "RefreshAfter")
		nodes := invariantNodes(t, rapid.IntRange(2, 4).Draw(t, "nodes"), store,
			Config{Clock: clock, RefreshAfter: refresh, ReplayInterval: time.Millisecond})
		defer func() {
			for _, l := range nodes {
				_ = l.Close()
			}
		}()
		admitted := map[origin.Cell]int64{}
		ctx := context.Background()
		draw := func(label string) Request {
			limit := rapid.SampledFrom([]int64{0, 1, 3, 10}).Draw(t, label+"limit")
			return Request{
				Namespace:  "inv",
				Identifier: rapid.SampledFrom([]string{"a", "b"}).Draw(t, label+"id"),
				Limit:      limit,
				Duration:   rapid.SampledFrom([]time.Duration{100 * time.Millisecond, time.Second}).Draw(t, label+"duration"),
				Cost:       rapid.Int64Range(0, 3).Draw(t, label+"cost"),
				Time:       clock(),
			}
		}
		cellOf := func(r Request) origin.Cell {
			var q resolved
			err := resolve(&q, &r, nil) // r.Time is set
			if err != nil {
				t.Fatal(err)
			}
			return q.current()
		}
		for step := range rapid.IntRange(1, 120).Draw(t, "steps") {
			var did string
			switch rapid.IntRange(0, 11).Draw(t, "action") {
			case 0, 1, 2, 3:
				r := draw("")
				node := rapid.IntRange(0, len(nodes)-1).Draw(t, "node")
				res, err := nodes[node].Ratelimit(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if res.Success {
					admitted[cellOf(r)] += r.Cost
				}
				did = fmt.Sprintf("node %d: %+v -> %v", node, r, res.Success)
			case 4, 5:
				var rs []Request
				rs, did = invariantBatch(t, nodes, draw, false)
				for _, r := range rs {
					admitted[cellOf(r)] += r.Cost
				}
			case 6, 7:
				step := rapid.SampledFrom([]int64{1, 10, 99, 100, 400, 1000}).Draw(t, "ms")
				now.Add(step)
				did = fmt.Sprintf("time +%d ms", step)
			case 8:
				time.Sleep(3 * time.Millisecond) // replays land and merge back
				did = "pause"
			case 10, 11: // usage after the fact: counted whatever the limit
				var rs []Request
				rs, did = invariantBatch(t, nodes, draw, true)
				for _, r := range rs {
					admitted[cellOf(r)] += r.Cost
				}
			default:
				did = "nothing"
			}
			for cell, total := range admitted {
				for i, l := range nodes {
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
	})
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
// instant inFlight + admitted bounds what the region has really admitted;
// the checker reads the local count first, then inFlight, then admitted,
// which can only overstate the bound. Besides the limiters' own hydrations,
// refreshes and replays, one goroutine per node merges the origin's total
// into its cell all the time.
func TestLocalViewNeverExceedsRegionConcurrently(t *testing.T) {
	if testing.Short() {
		t.Skip("concurrent stress")
	}
	store := memory.New(nil)
	nodes := invariantNodes(t, 3, store, Config{RefreshAfter: 5 * time.Millisecond, ReplayInterval: time.Millisecond})
	defer func() {
		for _, l := range nodes {
			_ = l.Close()
		}
	}()
	ctx := context.Background()
	base := Request{Namespace: "inv", Identifier: "hot", Duration: time.Hour, Time: time.UnixMilli(1_700_000_000_000)}
	var q resolved
	err := resolve(&q, &base, nil)
	if err != nil {
		t.Fatal(err)
	}
	cell := q.current()
	var inFlight, admitted atomic.Int64
	var violations atomic.Int64
	var first sync.Once
	stop := make(chan struct{})
	var checker sync.WaitGroup
	checker.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i, l := range nodes {
				c := l.cells.load(l.cells.keyHash(&cell.Key), &cell)
				if c == nil {
					continue
				}
				local := c.committed()
				bound := inFlight.Load() + admitted.Load()
				if local > bound {
					violations.Add(1)
					first.Do(func() { t.Errorf("node %d holds %d committed, the region admitted at most %d", i, local, bound) })
				}
			}
		}
	})
	// Origin reads besides the limiters' own: each node merges the origin's
	// total into its cell all the time, as a hydration, refresh or replay
	// does.
	for _, l := range nodes {
		checker.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if c := l.cells.load(l.cells.keyHash(&cell.Key), &cell); c != nil {
					counts, _ := store.Load(ctx, cell.Key, cell.Sequence)
					c.mergeRead(counts.Current)
				}
			}
		})
	}
	var callers sync.WaitGroup
	for w := range 6 {
		callers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			l := nodes[w%len(nodes)]
			for range 1500 {
				r := base
				r.Limit = []int64{200, 400, 600}[rng.IntN(3)]
				r.Cost = 1 + rng.Int64N(3)
				switch rng.IntN(3) {
				case 0:
					inFlight.Add(r.Cost)
					res, _ := l.Ratelimit(ctx, r)
					if res.Success {
						admitted.Add(r.Cost)
					}
					inFlight.Add(-r.Cost)
				case 1:
					inFlight.Add(2 * r.Cost)
					out, _ := l.RatelimitMany(ctx, []Request{r, r})
					if out[0].Success && out[1].Success {
						admitted.Add(2 * r.Cost)
					}
					inFlight.Add(-2 * r.Cost)
				default: // rolls back: admits nothing
					never := base
					never.Identifier, never.Limit, never.Cost = "closed", 0, 1
					inFlight.Add(r.Cost)
					_, _ = l.RatelimitMany(ctx, []Request{r, never})
					inFlight.Add(-r.Cost)
				}
			}
		})
	}
	callers.Wait()
	close(stop)
	checker.Wait()
	t.Logf("admitted %d units; %d violations", admitted.Load(), violations.Load())
}
