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

// freezableOrigin is a memory store until frozen, then an origin that
// never answers.
type freezableOrigin struct {
	*memory.Store
	hanging hangingOrigin
	frozen  atomic.Bool
}

func (f *freezableOrigin) Load(ctx context.Context, k origin.Key, seq int64) (origin.Counts, error) {
	if f.frozen.Load() {
		return f.hanging.Load(ctx, k, seq)
	}
	return f.Store.Load(ctx, k, seq)
}

func (f *freezableOrigin) LoadMany(ctx context.Context, cells []origin.Cell) ([]origin.Counts, error) {
	if f.frozen.Load() {
		return f.hanging.LoadMany(ctx, cells)
	}
	return f.Store.LoadMany(ctx, cells)
}

func (f *freezableOrigin) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	if f.frozen.Load() {
		return f.hanging.Decide(ctx, c)
	}
	return f.Store.Decide(ctx, c)
}

// TestBatchDeniedLocallyWaitsForNothing sends a batch of a fresh counter
// and a counter this node has exhausted while the origin hangs: the batch
// is denied at once (virtual time), without hydrating the fresh one first,
// as a single denial never waits.
func TestBatchDeniedLocallyWaitsForNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &freezableOrigin{Store: memory.New(nil)}
		l, err := sluice.New(sluice.Config{Origin: o, FlushTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx := context.Background()
		now := time.Now()
		exhausted := sluice.Request{Namespace: "n", Identifier: "spent", Limit: 1, Duration: time.Hour, Cost: 1, Time: now}
		if res, err := l.Ratelimit(ctx, exhausted); err != nil || !res.Success {
			t.Fatalf("first unit: %+v, %v", res, err)
		}
		o.frozen.Store(true)
		fresh := sluice.Request{Namespace: "n", Identifier: "fresh", Limit: 10, Duration: time.Hour, Cost: 1, Time: now}
		start := time.Now()
		out, err := l.RatelimitMany(ctx, []sluice.Request{fresh, exhausted})
		if err != nil || out[1].Success {
			t.Fatalf("batch: %+v, %v; want the exhausted counter denied", out, err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("a batch its local view denies waited %v on the origin", waited)
		}
	})
}

// TestReservationAnswersCountUnsentUnits has a node admit 15 of 20 and not
// replay them, then send a batch whose first request (cost 2) brings the
// counter near its limit: the origin decides it as a reservation, counting
// the node's 15 it has not received, and the answer reports the window's
// usage as 17, not the 2 the origin holds.
func TestReservationAnswersCountUnsentUnits(t *testing.T) {
	l, _ := newDriven(t, sluice.Config{Origin: memory.New(nil)}, drive.Options{ReplayTicks: make(chan time.Time)}) // never replays
	ctx := context.Background()
	now := time.Now()
	r := sluice.Request{Namespace: "n", Identifier: "x", Limit: 20, Duration: time.Hour, Cost: 15, Time: now}
	if res, err := l.Ratelimit(ctx, r); err != nil || !res.Success {
		t.Fatalf("15 of 20: %+v, %v", res, err)
	}
	r.Cost = 2
	side := sluice.Request{Namespace: "n", Identifier: "y", Limit: 1000, Duration: time.Hour, Cost: 1, Time: now}
	out, err := l.RatelimitMany(ctx, []sluice.Request{r, side})
	if err != nil || !out[0].Success {
		t.Fatalf("batch: %+v, %v", out, err)
	}
	if out[0].Current != 17 || out[0].Remaining != 3 {
		t.Errorf("the reservation answered current %d remaining %d, want 17 and 3", out[0].Current, out[0].Remaining)
	}
}
