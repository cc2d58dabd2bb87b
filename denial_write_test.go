package sluice_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/global"
	globalmemory "github.com/sluicehq/sluice/global/memory"
	"github.com/sluicehq/sluice/internal/drive"
)

// denialLog is a global store that records the order of its reads and
// denial writes, and the denial rows written.
type denialLog struct {
	*globalmemory.Store
	mu     sync.Mutex
	calls  []call
	emits  int      // denial rows sent
	denied []string // the regions whose rows were sent
}

// call is one call of a denialLog: a read or a write of denials, and when
// it came (in a synctest bubble, calls of one round come at one instant).
type call struct {
	kind string // "read" or "emit"
	at   time.Time
}

func newDenialLog() *denialLog { return &denialLog{Store: globalmemory.New()} }

func (s *denialLog) record(kind string, ds []global.Denial) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call{kind, time.Now()})
	s.emits += len(ds)
	for _, d := range ds {
		s.denied = append(s.denied, d.Region)
	}
}

func (s *denialLog) PullWithDenials(ctx context.Context, region string, cursor, denialCursor global.Cursor, now, activeFor int64) (global.Pull, []global.Denial, global.Cursor, error) {
	s.record("read", nil)
	return s.Store.PullWithDenials(ctx, region, cursor, denialCursor, now, activeFor)
}

func (s *denialLog) Denials(ctx context.Context, region string, cursor global.Cursor, now int64) ([]global.Denial, global.Cursor, error) {
	s.record("read", nil)
	return s.Store.Denials(ctx, region, cursor, now)
}

func (s *denialLog) EmitDenials(ctx context.Context, ds []global.Denial) error {
	s.record("emit", ds)
	return s.Store.EmitDenials(ctx, ds)
}

func (s *denialLog) log() (calls []call, emits int, denied []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls), s.emits, slices.Clone(s.denied)
}

// TestRoundLeavesOutDenialsAlreadyStored has two regions deny one counter
// before either round: the first round writes region 0's row, and region
// 1's round, which reads that row first, leaves its own out (the store
// keeps the first row of a cell, so it would change nothing) and reports
// it (GlobalStats.DenialsLeft).
func TestRoundLeavesOutDenialsAlreadyStored(t *testing.T) {
	const limit, d = 100, 10 * time.Minute
	modes := []struct {
		name string
		cfg  sluice.GlobalConfig
	}{
		{"read with the pull", sluice.GlobalConfig{}},
		{"read alone", sluice.GlobalConfig{DisableCounters: true}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			clock := &virtualClock{}
			clock.set(5000*d.Milliseconds() + 1000)
			store := newDenialLog()
			left := &leftDenials{}
			regions := make([]drivenNode, 2)
			for i := range regions {
				g := mode.cfg
				g.Store = store
				l, h := newDriven(t, sluice.Config{Region: fmt.Sprintf("region-%d", i), Global: &g, Clock: clock.now, Observer: left},
					drive.Options{GlobalTicks: make(chan time.Time)}) // never fires: the test syncs
				regions[i] = drivenNode{l, h}
			}
			syncAll(t, regions) // both regions present
			ctx := context.Background()
			for i, r := range regions {
				if res, _ := r.Ratelimit(ctx, req("both", limit, 60, d, time.Time{})); !res.Success {
					t.Fatalf("region %d denied 60 of 100", i)
				}
				if res, _ := r.Ratelimit(ctx, req("both", limit, 50, d, time.Time{})); res.Success {
					t.Fatalf("region %d admitted 60 + 50 of 100", i)
				}
			}
			clock.advance(time.Second)
			syncAll(t, regions)
			if _, emits, denied := store.log(); emits != 1 || !slices.Equal(denied, []string{"region-0"}) {
				t.Errorf("%d denial rows sent, by %v; want region-0's alone", emits, denied)
			}
			if n := left.n.Load(); n != 1 {
				t.Errorf("%d denial rows reported left out, want 1", n)
			}
		})
	}
}

// leftDenials counts the denial rows the global layer reports left out.
type leftDenials struct {
	ignoring
	n atomic.Int64
}

func (o *leftDenials) GlobalRound(st sluice.GlobalStats) { o.n.Add(int64(st.DenialsLeft)) }

// TestDenialsWaitForARoundDueInTime runs the global loop on its own timers
// (in a synctest bubble): a denial is written within DenialFlush either
// way, by the round when one is due in time, after the round's read, and
// between rounds when the next round is further away.
func TestDenialsWaitForARoundDueInTime(t *testing.T) {
	const limit, d = 100, 10 * time.Minute
	cases := []struct {
		name       string
		interval   time.Duration
		afterARead bool // the denial is written after a read, by a round
	}{
		{"rounds more often than DenialFlush", 400 * time.Millisecond, true},
		{"rounds further apart", 30 * time.Second, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newDenialLog()
				l, err := sluice.New(sluice.Config{Region: "a", Global: &sluice.GlobalConfig{
					Store: store, Interval: tc.interval, DenialFlush: time.Second, DisableCounters: true,
				}})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				time.Sleep(tc.interval / 2) // before the first round, due at 0.8–1.2 intervals
				ctx := context.Background()
				if res, _ := l.Ratelimit(ctx, req("x", limit, 60, d, time.Time{})); !res.Success {
					t.Fatal("60 of 100 denied")
				}
				if res, _ := l.Ratelimit(ctx, req("x", limit, 50, d, time.Time{})); res.Success {
					t.Fatal("60 + 50 of 100 admitted")
				}
				time.Sleep(time.Second)
				synctest.Wait()
				calls, emits, _ := store.log()
				if emits != 1 {
					t.Fatalf("%d denial rows written within DenialFlush, want 1", emits)
				}
				i := slices.IndexFunc(calls, func(c call) bool { return c.kind == "emit" })
				inRound := i > 0 && calls[i-1].kind == "read" && calls[i-1].at.Equal(calls[i].at)
				if inRound != tc.afterARead {
					t.Errorf("calls %v: written by a round after its read = %v, want %v", calls, inRound, tc.afterARead)
				}
			})
		})
	}
}
