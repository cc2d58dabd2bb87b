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

// TestParkedReplay checks when a cell's replay waits for the parked list:
// only far from its limit, with few unconfirmed increments and a window at
// least RefreshAfter long; then it is replayed at the second turn of the
// list after it was parked, RefreshAfter/2 later, not before.
func TestParkedReplay(t *testing.T) {
	const refresh = 10 * time.Second // the parked list turns every 5 s
	tests := []struct {
		name     string
		margin   float64
		limit    int64
		requests int
		window   time.Duration
		parked   bool
	}{
		{"far from the limit", 0, 1000, 10, time.Minute, true},
		{"within twice the margin of the limit", 0, 100, 61, time.Minute, false},
		{"unconfirmed reach margin/16 of the limit", 0, 1000, 13, time.Minute, false},
		{"window shorter than RefreshAfter", 0, 1000, 10, refresh / 2, false},
		{"origin margin off", -1, 1000, 10, time.Minute, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &countingOrigin{Origin: memory.New(nil)}
				ticks := make(chan time.Time)
				l, _ := newDriven(t, sluice.Config{Origin: store, RefreshAfter: refresh, OriginMargin: tc.margin},
					drive.Options{ReplayTicks: ticks})
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
				if !tc.parked {
					if n := tick(); n != 1 {
						t.Fatalf("%d replays at the first round, want 1", n)
					}
					return
				}
				if n := tick(); n != 0 {
					t.Fatalf("%d replays at the first round, want 0 (parked)", n)
				}
				time.Sleep(refresh/2 - time.Millisecond)
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
