package sluice_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// heldOrigin holds every Apply until release is closed, so that a replay
// is in flight (its increments taken off the cell, not yet at the origin)
// for as long as a test needs.
type heldOrigin struct {
	origin.Origin
	applying chan struct{} // closed when the first Apply starts
	release  chan struct{}
	once     sync.Once
}

func (h *heldOrigin) Apply(ctx context.Context, ds []origin.Delta) ([]int64, error) {
	h.once.Do(func() { close(h.applying) })
	<-h.release
	return h.Origin.Apply(ctx, ds)
}

// TestOriginDecisionSeesReplayInFlight admits 9 units of a limit of 10
// locally and holds their replay in flight; the 10th unit and everything
// after it are decided at the origin (within OriginMargin of the limit).
// The 10th passes; the 11th must not: this node has admitted the limit
// already, whether or not its replay has landed.
func TestOriginDecisionSeesReplayInFlight(t *testing.T) {
	held := &heldOrigin{Origin: memory.New(nil), applying: make(chan struct{}), release: make(chan struct{})}
	// A margin of 10%: units 1-9 are admitted locally, the 10th and after at the origin.
	l := newLimiter(t, sluice.Config{Origin: held, RefreshAfter: time.Hour, OriginMargin: 0.1})
	defer close(held.release) // before the limiter's Close, which flushes
	ctx := context.Background()
	r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 10, Duration: time.Hour, Cost: 1, Time: time.Now()}
	for i := range 9 {
		if res, err := l.Ratelimit(ctx, r); err != nil || !res.Success {
			t.Fatalf("unit %d: %+v, %v", i+1, res, err)
		}
	}
	select {
	case <-held.applying:
	case <-time.After(5 * time.Second):
		t.Fatal("the replay of the first 9 units did not start")
	}
	tenth, err := l.Ratelimit(ctx, r)
	if err != nil || !tenth.Success {
		t.Fatalf("unit 10: %+v, %v; want admitted", tenth, err)
	}
	if res, err := l.Ratelimit(ctx, r); err != nil || res.Success {
		t.Fatalf("unit 11 of a limit of 10: %+v, %v; want a denial (unit 10 was answered with Current %d)", res, err, tenth.Current)
	}
	if tenth.Current != 10 {
		t.Errorf("unit 10 answered with Current %d, want 10", tenth.Current)
	}
}
