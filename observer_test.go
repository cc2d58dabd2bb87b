package sluice_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin/memory"
)

// ignoring is a sluice.Observer that ignores everything: embed it to
// observe part.
type ignoring struct{}

func (ignoring) OriginRead(string, time.Duration, error) {}
func (ignoring) Replayed(int, time.Duration, error)      {}
func (ignoring) ReplayBacklog(int64)                     {}
func (ignoring) Swept(int, int)                          {}
func (ignoring) Evicted(string, int)                     {}
func (ignoring) Dropped(string, int, int64)              {}
func (ignoring) GlobalRound(sluice.GlobalStats)          {}

// recorder counts what the limiter reports to its Observer.
type recorder struct {
	mu       sync.Mutex
	reads    map[string]int
	replayed int
	swept    int
	dropped  map[string]int64
}

func (r *recorder) OriginRead(reason string, _ time.Duration, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads[reason]++
}

func (r *recorder) Replayed(cells int, _ time.Duration, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replayed += cells
}

func (r *recorder) ReplayBacklog(int64) {}

func (r *recorder) Dropped(reason string, _ int, increments int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dropped == nil {
		r.dropped = map[string]int64{}
	}
	r.dropped[reason] += increments
}

func (r *recorder) Evicted(string, int) {}

func (r *recorder) GlobalRound(sluice.GlobalStats) {}

// droppedOf returns the increments reported dropped for reason.
func (r *recorder) droppedOf(reason string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped[reason]
}

func (r *recorder) Swept(_, evicted int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.swept += evicted
}

func TestObserverSeesOriginTraffic(t *testing.T) {
	rec := &recorder{reads: map[string]int{}}
	l := newLimiter(t, sluice.Config{Origin: memory.New(nil), Observer: rec, RefreshAfter: time.Second})
	ctx := context.Background()
	for _, step := range []struct {
		id       string
		cost, ms int64
	}{
		{"u", 1, 1_000},  // cold: hydrate
		{"u", 1, 1_100},  // warm: no read
		{"u", 1, 1_200},  // denied at limit 2: strict from now on
		{"u", 0, 1_300},  // strict peek: decided locally
		{"w", 2, 1_000},  // cold: hydrate
		{"w", 1, 1_100},  // denied: strict until 11_100
		{"w", 1, 10_900}, // next cell: hydrate; the previous weighs 1, so the origin decides
		{"v", 0, 1_000},  // cold: hydrate
		{"v", 0, 2_500},  // warm but older than RefreshAfter: refresh
	} {
		if _, err := l.Ratelimit(ctx, req(step.id, 2, step.cost, 10*time.Second, at(step.ms))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := map[string]int{"hydrate": 4, "strict": 1, "refresh": 1}
	for reason, n := range want {
		if rec.reads[reason] != n {
			t.Errorf("%s reads = %d, want %d (all: %v)", reason, rec.reads[reason], n, rec.reads)
		}
	}
	if rec.replayed < 1 {
		t.Errorf("replayed %d cells, want at least 1", rec.replayed)
	}
}
