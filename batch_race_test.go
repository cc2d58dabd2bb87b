package sluice

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin/memory"
)

// TestBatchRollbackUnderConcurrentMerges runs a batch that always rolls back
// while origin totals are merged into its cell: the rollback must leave
// nothing behind, so the full limit is still there afterwards.
func TestBatchRollbackUnderConcurrentMerges(t *testing.T) {
	l, err := New(Config{Origin: memory.New(nil), RefreshAfter: time.Hour, OriginMargin: -1}) // no origin calls: only merges race
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	for trial := range 2000 {
		id := strconv.Itoa(trial)
		spend := Request{Namespace: "n", Identifier: id, Limit: 10, Cost: 10, Duration: time.Hour, Time: now}
		never := Request{Namespace: "n", Identifier: "closed-" + id, Limit: 0, Cost: 1, Duration: time.Hour, Time: now}
		peek := spend
		peek.Cost = 0
		if _, err := l.Ratelimit(ctx, peek); err != nil { // creates and hydrates the cell
			t.Fatal(err)
		}
		var q resolved
		_ = resolve(&q, &spend, nil)
		lk := q.current()
		cur := l.cells.load(l.cells.keyHash(&q.cell.Key), &lk)

		stop := make(chan struct{})
		var merging sync.WaitGroup
		merging.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					cur.mergeRead(0) // an origin read that knows nothing yet
				}
			}
		})
		out, err := l.RatelimitMany(ctx, []Request{spend, never})
		close(stop)
		merging.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if !out[0].Success || out[1].Success {
			t.Fatalf("trial %d: batch answers %+v, want the first to pass at its point and the second to fail", trial, out)
		}
		if res, _ := l.Ratelimit(ctx, spend); !res.Success {
			t.Fatalf("trial %d: a cost-10 request on a limit-10 counter with nothing spent was denied (current %d)", trial, res.Current)
		}
	}
}

// TestMixedDecisionsUnderReplayAreExact has several goroutines send single
// requests and batches (a share of which roll back) to one limiter whose
// origin merges replayed totals back all the time. Whatever the interleaving,
// what was admitted is counted exactly once: locally, at the origin, and
// never above the limit.
func TestMixedDecisionsUnderReplayAreExact(t *testing.T) {
	store := memory.New(nil)
	// A caller that gives up on the origin decides locally, which is not
	// exact near the limit: the generous timeout keeps a starved machine
	// (the race detector, a busy CI) from turning this into a fault test.
	l, err := New(Config{Origin: store, ReplayInterval: time.Millisecond, RefreshAfter: time.Millisecond, OriginTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	const limit = 400
	hot := Request{Namespace: "n", Identifier: "hot", Limit: limit, Duration: time.Hour, Time: now}
	closed := Request{Namespace: "n", Identifier: "closed", Limit: 0, Duration: time.Hour, Time: now}
	var admitted atomic.Int64
	var workers sync.WaitGroup
	for w := range 4 {
		workers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 400 {
				r := hot
				r.Cost = 1 + rng.Int64N(3)
				switch rng.IntN(3) {
				case 0:
					if res, _ := l.Ratelimit(ctx, r); res.Success {
						admitted.Add(r.Cost)
					}
				case 1:
					out, _ := l.RatelimitMany(ctx, []Request{r, r})
					if out[0].Success && out[1].Success {
						admitted.Add(2 * r.Cost)
					}
				default: // always rolls back
					c := closed
					c.Cost = 1
					_, _ = l.RatelimitMany(ctx, []Request{r, c})
				}
			}
		})
	}
	workers.Wait()
	peek := hot
	res, err := l.Ratelimit(ctx, peek)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var q resolved
	_ = resolve(&q, &hot, nil)
	counts, _ := store.Load(ctx, q.cell.Key, q.pos.Seq)
	got := admitted.Load()
	switch {
	case got > limit:
		t.Fatalf("admitted %d over the limit %d", got, limit)
	case res.Current != got:
		t.Fatalf("local count %d, admitted %d", res.Current, got)
	case counts.Current != got:
		t.Fatalf("origin count %d, admitted %d", counts.Current, got)
	}
}
