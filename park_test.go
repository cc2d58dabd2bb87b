package sluice_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// TestParkedReplay checks when a cell's replay waits for a parked list:
// only far from its limit and with few unconfirmed increments; a window at
// least RefreshAfter long waits for the list that turns every
// RefreshAfter/2, a shorter one of at least 8 of the short list's turns (4
// replay intervals) for that list, and a window shorter still is not
// parked. A parked cell is replayed at the second turn of its list after
// it was parked, one turn later, not before.
func TestParkedReplay(t *testing.T) {
	const refresh = 10 * time.Second        // the long list turns every 5 s
	const short = 4 * 25 * time.Millisecond // the short list's turn: 4 × the default ReplayInterval
	tests := []struct {
		name     string
		margin   float64
		limit    int64
		requests int
		window   time.Duration
		turn     time.Duration // of the list the cell is parked on; 0: not parked
	}{
		{"far from the limit", 0, 1000, 10, time.Minute, refresh / 2},
		{"within twice the margin of the limit", 0, 100, 61, time.Minute, 0},
		{"unconfirmed reach margin/16 of the limit", 0, 1000, 13, time.Minute, 0},
		{"window shorter than RefreshAfter", 0, 1000, 10, refresh / 2, short},
		{"window of 8 short turns", 0, 1000, 10, 8 * short, short},
		{"window under 8 short turns", 0, 1000, 10, 8*short - time.Millisecond, 0},
		{"origin margin off", -1, 1000, 10, time.Minute, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &countingOrigin{Origin: memory.New(nil)}
				ticks := make(chan time.Time)
				l, _ := newDriven(t, sluice.Config{Origin: store, RefreshAfter: refresh, OriginMargin: tc.margin},
					drive.Options{ReplayTicks: ticks})
				// Starting a window: the whole test stays within it.
				time.Sleep(time.Until(time.Now().Truncate(tc.window).Add(tc.window)))
				r := sluice.Request{Namespace: "ns", Identifier: "parked", Limit: tc.limit, Duration: tc.window, Cost: 1}
				for range tc.requests {
					if res, err := l.Ratelimit(context.Background(), r); err != nil || !res.Success {
						t.Fatalf("Ratelimit = %+v, %v; want a pass", res, err)
					}
				}
				tick := func() int64 {
					ticks <- time.Time{}
					synctest.Wait()
					return store.applies.Load()
				}
				if tc.turn == 0 {
					if n := tick(); n != 1 {
						t.Fatalf("%d replays at the first round, want 1", n)
					}
					return
				}
				if n := tick(); n != 0 {
					t.Fatalf("%d replays at the first round, want 0 (parked)", n)
				}
				time.Sleep(tc.turn - time.Millisecond)
				if n := tick(); n != 0 {
					t.Fatalf("%d replays before the next turn, want 0", n)
				}
				time.Sleep(time.Millisecond)
				if n := tick(); n != 1 {
					t.Fatalf("%d replays at the next turn, want 1", n)
				}
				assertOriginHolds(t, store, r, int64(tc.requests))
			})
		})
	}
}

// TestBatchCellsPark: the cells of an admitted batch park by the rule of a
// single request: far from their limits, a batch's cells, of a window
// shorter than RefreshAfter here, wait for the short list's next turn,
// and are then replayed together.
func TestBatchCellsPark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &countingOrigin{Origin: memory.New(nil)}
		ticks := make(chan time.Time)
		l, _ := newDriven(t, sluice.Config{Origin: store}, drive.Options{ReplayTicks: ticks})
		const window = time.Second
		time.Sleep(time.Until(time.Now().Truncate(window).Add(window)))
		rs := []sluice.Request{
			{Namespace: "ns", Identifier: "a", Limit: 1000, Duration: window, Cost: 1},
			{Namespace: "ns", Identifier: "b", Limit: 1000, Duration: window, Cost: 2},
		}
		if res, err := l.RatelimitMany(context.Background(), rs); err != nil || !res[0].Success || !res[1].Success {
			t.Fatalf("RatelimitMany = %+v, %v; want both passed", res, err)
		}
		tick := func() int64 {
			ticks <- time.Time{}
			synctest.Wait()
			return store.applies.Load()
		}
		if n := tick(); n != 0 {
			t.Fatalf("%d replays at the first round, want 0 (parked)", n)
		}
		time.Sleep(4 * 25 * time.Millisecond) // the short list's turn
		if n := tick(); n != 1 {
			t.Fatalf("%d replays at the next turn, want 1 (both cells)", n)
		}
		assertOriginHolds(t, store, rs[0], 1)
		assertOriginHolds(t, store, rs[1], 2)
	})
}

// TestCloseReplaysParkedCells checks that Close replays a parked cell
// before it returns, so parking loses nothing on shutdown.
func TestCloseReplaysParkedCells(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &countingOrigin{Origin: memory.New(nil)}
		l, err := sluice.New(sluice.Config{Origin: store})
		if err != nil {
			t.Fatal(err)
		}
		r := sluice.Request{Namespace: "ns", Identifier: "parked", Limit: 1000, Duration: time.Minute, Cost: 1}
		for range 5 {
			if _, err := l.Ratelimit(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait() // the dispatcher's first round has passed: the cell stays parked
		if n := store.applies.Load(); n != 0 {
			t.Fatalf("%d replays before Close, want 0 (parked)", n)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		assertOriginHolds(t, store, r, 5)
	})
}

// assertOriginHolds fails t unless the origin's current cell of r's
// counter holds want.
func assertOriginHolds(t *testing.T, o origin.Origin, r sluice.Request, want int64) {
	t.Helper()
	k := origin.Key{Namespace: r.Namespace, Identifier: r.Identifier, Duration: r.Duration}
	seq := time.Now().UnixMilli() / r.Duration.Milliseconds()
	counts, err := o.Load(context.Background(), k, seq)
	if err != nil || counts.Current != want {
		t.Fatalf("origin holds %+v, %v; want %d", counts, err, want)
	}
}

// backlogGauge keeps the last backlog the limiter reported.
type backlogGauge struct {
	ignoring
	last atomic.Int64
}

func (g *backlogGauge) ReplayBacklog(cells int64) { g.last.Store(cells) }

// TestBacklogCountsParkedCells checks that the replay backlog an operator
// watches counts a parked cell until its replay lands, and reads zero
// after.
func TestBacklogCountsParkedCells(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const refresh = 10 * time.Second
		gauge := &backlogGauge{}
		gauge.last.Store(-1)
		store := memory.New(nil)
		ticks := make(chan time.Time)
		l, _ := newDriven(t, sluice.Config{Origin: store, RefreshAfter: refresh, Observer: gauge},
			drive.Options{ReplayTicks: ticks})
		r := sluice.Request{Namespace: "ns", Identifier: "parked", Limit: 1000, Duration: time.Minute, Cost: 1}
		if _, err := l.Ratelimit(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		tick := func() int64 {
			ticks <- time.Time{}
			synctest.Wait()
			return gauge.last.Load()
		}
		if n := tick(); n != 1 {
			t.Fatalf("backlog %d while the cell is parked, want 1", n)
		}
		time.Sleep(refresh / 2)
		if n := tick(); n != 0 {
			t.Fatalf("backlog %d after the parked cell was replayed, want 0", n)
		}
		assertOriginHolds(t, store, r, 1)
	})
}
