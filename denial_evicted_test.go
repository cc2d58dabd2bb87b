package sluice

import (
	"context"
	"testing"
	"time"

	globalmemory "github.com/sluicehq/sluice/global/memory"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin/memory"
)

// TestDenialRowOnEvictedCell has region a admit 40 of 100 and publish it,
// region b import the 40, admit 55 and deny 10 more: b's denial row
// carries a usage of 95, 40 of them a's. Region a has evicted the cell
// meanwhile; the row, written ahead of b's count, creates it again, and a
// request hydrates it from a's origin. a must see 95 and admit the 5 units left: importing the row's
// whole usage over the evicted cell counted a's 40 twice (135: every unit
// denied for the rest of the window).
func TestDenialRowOnEvictedCell(t *testing.T) {
	const limit, d = 100, 10 * time.Minute
	now := time.UnixMilli(5000*d.Milliseconds() + 1000)
	clock := func() time.Time { return now }
	store := globalmemory.New()
	node := func(region string) *Limiter {
		l, err := newLimiter(Config{Region: region, Origin: memory.New(clock), Clock: clock, Global: &GlobalConfig{Store: store}},
			drive.Options{GlobalTicks: make(chan time.Time)}) // never fires: the test syncs
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	a, b := node("a"), node("b")
	ctx := context.Background()
	sync := func() {
		t.Helper()
		for _, l := range []*Limiter{a, b, a, b} {
			if err := l.syncGlobal(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := Request{Namespace: "n", Identifier: "shared", Limit: limit, Duration: d}
	spend := func(l *Limiter, cost int64, want bool) {
		t.Helper()
		r.Cost = cost
		if res, err := l.Ratelimit(ctx, r); err != nil || res.Success != want {
			t.Fatalf("cost %d: %+v, %v; want success %v", cost, res, err, want)
		}
	}
	spend(a, 40, true)
	a.replay.flushNow()
	sync()
	spend(b, 55, true)
	spend(b, 10, false)
	b.replay.flushNow()
	var q resolved
	if err := resolve(&q, &r, a.nowMilli); err != nil {
		t.Fatal(err)
	}
	if c := a.cells.load(a.cells.keyHash(&q.cell.Key), &q.cell); c == nil || !a.cells.delete(q.cell, c) {
		t.Fatal("a's cell was not there to evict")
	}
	// b writes its denial between rounds, ahead of its count: a's next
	// round reads the row and no new count of the cell.
	b.flushDenialsNow(ctx)
	if err := a.syncGlobal(ctx); err != nil {
		t.Fatal(err)
	}
	spend(a, 5, true)
	spend(a, 1, false)
}
