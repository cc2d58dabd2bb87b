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

// landedOrigin applies every Apply at once but holds its reply until
// release is closed: the replay has landed at the origin, and the limiter
// does not know it yet.
type landedOrigin struct {
	origin.Origin
	applied chan struct{} // closed when the first Apply has landed
	release chan struct{}
	once    sync.Once
}

func (h *landedOrigin) Apply(ctx context.Context, ds []origin.Delta) ([]int64, error) {
	totals, err := h.Origin.Apply(ctx, ds)
	h.once.Do(func() { close(h.applied) })
	<-h.release
	return totals, err
}

// TestOriginDecisionAfterReplayLanded admits 9 units of a limit of 10
// locally; their replay lands at the origin, but its reply is late. The 10th
// unit, decided at the origin meanwhile, must pass with Current 10: the 9
// units count once, not once at the origin and again as in flight.
func TestOriginDecisionAfterReplayLanded(t *testing.T) {
	landed := &landedOrigin{Origin: memory.New(nil), applied: make(chan struct{}), release: make(chan struct{})}
	// A margin of 10%: units 1-9 are admitted locally, the 10th at the origin.
	l := newLimiter(t, sluice.Config{Origin: landed, RefreshAfter: time.Hour, OriginMargin: 0.1})
	ctx := context.Background()
	r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 10, Duration: time.Hour, Cost: 1, Time: time.Now()}
	for i := range 9 {
		if res, err := l.Ratelimit(ctx, r); err != nil || !res.Success {
			t.Fatalf("unit %d: %+v, %v", i+1, res, err)
		}
	}
	select {
	case <-landed.applied:
	case <-time.After(5 * time.Second):
		t.Fatal("the replay of the first 9 units did not land")
	}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(landed.release) }) }
	t.Cleanup(release) // before the limiter's Close, which flushes
	time.AfterFunc(50*time.Millisecond, release)
	tenth, err := l.Ratelimit(ctx, r)
	if err != nil || !tenth.Success || tenth.Current != 10 {
		t.Fatalf("unit 10 of a limit of 10: %+v, %v; want admitted with Current 10", tenth, err)
	}
	if res, err := l.Ratelimit(ctx, r); err != nil || res.Success {
		t.Fatalf("unit 11 of a limit of 10: %+v, %v; want a denial", res, err)
	}
}
