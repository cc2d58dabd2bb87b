package sluice

import (
	"context"
	"math"
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

// TestMaxCountersBoundsMemory sends ten times MaxCounters distinct
// identities: the cells held stay under the cap, the heap with them, and
// the identities in use are the ones kept.
func TestMaxCountersBoundsMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxCells = 10_000
		l, err := New(Config{MaxCounters: maxCells})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx := context.Background()
		hot := Request{Namespace: "n", Identifier: "hot", Limit: 1 << 40, Duration: time.Hour, Cost: 1}
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range 10 * maxCells {
			r := Request{Namespace: "n", Identifier: "id-" + strconv.Itoa(i), Limit: 10, Duration: time.Hour, Cost: 1}
			if _, err := l.Ratelimit(ctx, r); err != nil {
				t.Fatal(err)
			}
			if i%100 == 0 {
				if _, err := l.Ratelimit(ctx, hot); err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // let the janitor evict when it was asked to
			}
		}
		synctest.Wait()
		if live := l.cells.live.Load(); live > maxCells {
			t.Fatalf("%d cells held, over the cap of %d", live, maxCells)
		}
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 200*maxCells*3 {
			t.Fatalf("heap grew by %d bytes for a cap of %d cells", grew, maxCells)
		}
		res, _ := l.Ratelimit(ctx, Request{Namespace: "n", Identifier: "hot", Limit: 1 << 40, Duration: time.Hour})
		if res.Current != 10*maxCells/100 {
			t.Fatalf("the hot counter holds %d, want %d: it was evicted although in use", res.Current, 10*maxCells/100)
		}
	})
}

// TestEvictionSparesStrictAndPendingCells fills the table past the cap with
// untouched cells, some of them in strict mode or with increments not
// replayed: while others can go, those stay.
func TestEvictionSparesStrictAndPendingCells(t *testing.T) {
	now := int64(1_700_000_000_000)
	// The janitor, woken past the cap, evicts at the same instant as the
	// test does.
	clock := func() time.Time { return time.UnixMilli(now) }
	l, err := New(Config{MaxCounters: 100, JanitorInterval: time.Hour, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The janitor must not evict while the cells are set up (a cell could
	// go between its creation and its strict mode): the table does not ask
	// for eviction until the test does.
	l.cells.max = math.MaxInt64
	var strict, pending []*cell
	for i := range 200 {
		r := Request{Namespace: "n", Identifier: strconv.Itoa(i), Limit: 10, Duration: time.Hour, Time: time.UnixMilli(now)}
		var q resolved
		_ = resolve(&q, &r, nil)
		ck := q.current()
		c := l.cells.loadOrCreate(l.cells.keyHash(&q.cell.Key), &ck, 1)
		switch i % 20 {
		case 0:
			c.raiseStrict(now + 1000)
			strict = append(strict, c)
		case 1:
			c.admitted.Store(3)
			pending = append(pending, c)
		}
	}
	l.evict(now)
	if live := l.cells.live.Load(); live > 90 {
		t.Fatalf("%d cells after eviction, want at most 90", live)
	}
	for _, c := range append(strict, pending...) {
		k := l.cells.m.KeyOf(c)
		if l.cells.m.Load(cellHash(l.cells.keyHash(&k.Key), k.Sequence), &k) != c {
			t.Fatal("a strict or pending cell was evicted while idle ones remained")
		}
	}
}
