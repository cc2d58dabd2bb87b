package sluice_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// batchCountingOrigin is a memory origin that counts the counters read
// one at a time (Load) and together (LoadMany).
type batchCountingOrigin struct {
	*memory.Store
	loads, loadedMany atomic.Int64
}

func (o *batchCountingOrigin) Load(ctx context.Context, k origin.Key, seq int64) (origin.Counts, error) {
	o.loads.Add(1)
	return o.Store.Load(ctx, k, seq)
}

func (o *batchCountingOrigin) LoadMany(ctx context.Context, cells []origin.Cell) ([]origin.Counts, error) {
	o.loadedMany.Add(int64(len(cells)))
	return o.Store.LoadMany(ctx, cells)
}

// TestReadLater: when a window rolls over, a counter this node served in
// the window before, far below its limit, is decided at once and its new
// cell read with the next replay round, which then brings in what another
// node admitted; a counter near its limit, one whose previous cell was read
// too long ago, and one this node never served wait for the read, as a
// cold counter does.
func TestReadLater(t *testing.T) {
	const d, limit = time.Second, 100 // OriginMargin 0.2: far below is under 60
	var now atomic.Int64
	clock := func() time.Time { return time.UnixMilli(now.Load()) }
	store := &batchCountingOrigin{Store: memory.New(clock)}
	node := func() (*sluice.Limiter, drive.Handle) {
		return newDriven(t, sluice.Config{Origin: store, Clock: clock}, drive.Options{ReplayTicks: make(chan time.Time)})
	}
	a, ha := node()
	b, hb := node()
	ctx := context.Background()
	for _, st := range []struct {
		name             string
		on               *sluice.Limiter
		id               string
		cost, ms         int64
		loads, loadsMany int64 // read before the decision; with the round after it
		remaining        int64 // -1: not checked
	}{
		{"a cold counter waits", a, "far", 1, 10_000, 1, 0, -1},
		{"warm", a, "far", 1, 10_500, 0, 0, -1},
		{"b admits 30 in the next window", b, "far", 30, 11_000, 1, 0, -1},
		// a's view: its own 1 now, and its 2 before weighing floor(2 × 999/1000) = 1.
		{"a: the window rolled over, far below the limit: no wait", a, "far", 1, 11_001, 0, 1, limit - 2},
		// After the round's read: b's 30 with a's 1, and a's 2 before weighing 1.
		{"a: the round's read brought b's 30 in", a, "far", 0, 11_002, 0, 0, limit - 32},
		{"near the limit: a waits", a, "near", 50, 12_000, 1, 0, -1},
		{"near the limit, next window: a waits", a, "near", 15, 13_000, 1, 0, -1},
		{"previous cell read long ago: a waits", a, "far", 1, 17_000, 1, 0, -1},
		{"never served here: b waits", b, "near", 1, 13_001, 1, 0, -1},
	} {
		now.Store(st.ms)
		loads, many := store.loads.Load(), store.loadedMany.Load()
		res, err := st.on.Ratelimit(ctx, req(st.id, limit, st.cost, d, time.Time{}))
		if err != nil || !res.Success {
			t.Fatalf("%s: %+v, %v; want a pass", st.name, res, err)
		}
		if st.remaining >= 0 && res.Remaining != st.remaining {
			t.Errorf("%s: remaining %d, want %d", st.name, res.Remaining, st.remaining)
		}
		if n := store.loads.Load() - loads; n != st.loads {
			t.Errorf("%s: %d reads before the decision, want %d", st.name, n, st.loads)
		}
		ha.Round()
		hb.Round()
		if n := store.loadedMany.Load() - many; n != st.loadsMany {
			t.Errorf("%s: %d cells read with the round, want %d", st.name, n, st.loadsMany)
		}
	}
}
