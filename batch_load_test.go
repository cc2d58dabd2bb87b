package sluice_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// batchLoader is a memory origin that counts its reads, and whose LoadMany
// can fail the cells of one identifier alone or answer one cell short.
type batchLoader struct {
	*memory.Store
	loads    atomic.Int64
	mu       sync.Mutex
	batches  [][]string // the identifiers of each LoadMany
	failing  string     // identifier whose cells LoadMany fails alone
	shortAns bool       // LoadMany answers one cell short
}

var errCellRefused = errors.New("test: cell refused")

func (b *batchLoader) Load(ctx context.Context, k origin.Key, seq int64) (origin.Counts, error) {
	b.loads.Add(1)
	return b.Store.Load(ctx, k, seq)
}

func (b *batchLoader) LoadMany(ctx context.Context, cells []origin.Cell) ([]origin.Counts, error) {
	b.mu.Lock()
	var ids []string
	for _, c := range cells {
		ids = append(ids, c.Identifier)
	}
	b.batches = append(b.batches, ids)
	b.mu.Unlock()
	counts, err := b.Store.LoadMany(ctx, cells)
	if err != nil {
		return nil, err
	}
	if b.shortAns {
		return counts[1:], nil
	}
	failed := map[int]error{}
	for i, c := range cells {
		if c.Identifier == b.failing {
			counts[i], failed[i] = origin.Counts{}, errCellRefused
		}
	}
	if len(failed) > 0 {
		return counts, &origin.CellErrors{Failed: failed}
	}
	return counts, nil
}

// TestBatchHydratesInOneCall sends a batch of counters another node has
// spent 5 of, some cold here, to an origin that reads several counters in
// one call: the cold ones are read with one LoadMany (a counter twice in
// the batch read once), a lone cold one with a Load; a cell the origin
// fails alone is decided locally and the others on what was read; an
// answer of the wrong size fails every cell.
func TestBatchHydratesInOneCall(t *testing.T) {
	tests := []struct {
		name     string
		warm     []string // counters decided here before the batch
		batch    []string
		failing  string
		short    bool
		loads    int64      // Loads the batch made
		batches  [][]string // LoadMany calls the batch made
		currents []int64
		failed   int // hydrations reported failed
	}{
		{name: "three cold counters", batch: []string{"a", "b", "c"},
			batches: [][]string{{"a", "b", "c"}}, currents: []int64{6, 6, 6}},
		{name: "a counter twice", batch: []string{"a", "b", "a"},
			batches: [][]string{{"a", "b"}}, currents: []int64{6, 6, 7}},
		{name: "one cold counter of three", warm: []string{"a", "b"}, batch: []string{"a", "b", "c"},
			loads: 1, currents: []int64{7, 7, 6}},
		{name: "a cell the origin fails alone", batch: []string{"a", "b", "c"}, failing: "b",
			batches: [][]string{{"a", "b", "c"}}, currents: []int64{6, 1, 6}, failed: 1},
		{name: "an answer of the wrong size", batch: []string{"a", "b", "c"}, short: true,
			batches: [][]string{{"a", "b", "c"}}, currents: []int64{1, 1, 1}, failed: 3},
	}
	now := time.Now()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &batchLoader{Store: memory.New(nil), failing: tc.failing, shortAns: tc.short}
			for _, id := range []string{"a", "b", "c"} {
				seq := now.UnixMilli() / time.Hour.Milliseconds()
				cell := origin.Cell{Key: origin.Key{Namespace: "ns", Identifier: id, Duration: time.Hour}, Sequence: seq}
				if _, err := o.Apply(context.Background(), []origin.Delta{{Cell: cell, Writer: 1, Sent: 5}}); err != nil {
					t.Fatal(err)
				}
			}
			rec := &recorder{reads: map[string]int{}}
			obs := &failedReads{recorder: rec}
			l := newLimiter(t, sluice.Config{Origin: o, Observer: obs, RefreshAfter: time.Hour})
			for _, id := range tc.warm {
				if _, err := l.Ratelimit(context.Background(), req(id, 100, 1, time.Hour, now)); err != nil {
					t.Fatal(err)
				}
			}
			loads := o.loads.Load()
			rs := make([]sluice.Request, len(tc.batch))
			for i, id := range tc.batch {
				rs[i] = req(id, 100, 1, time.Hour, now)
			}
			out, err := l.RatelimitMany(context.Background(), rs)
			if err != nil {
				t.Fatal(err)
			}
			var currents []int64
			for _, res := range out {
				currents = append(currents, res.Current)
			}
			if !slices.Equal(currents, tc.currents) {
				t.Errorf("currents %v, want %v", currents, tc.currents)
			}
			if n := o.loads.Load() - loads; n != tc.loads {
				t.Errorf("%d Loads, want %d", n, tc.loads)
			}
			if !slices.EqualFunc(o.batches, tc.batches, slices.Equal) {
				t.Errorf("LoadMany calls %v, want %v", o.batches, tc.batches)
			}
			if n := obs.failed.Load(); n != int64(tc.failed) {
				t.Errorf("%d hydrations reported failed, want %d", n, tc.failed)
			}
		})
	}
}

// failedReads is a recorder that also counts the origin reads that failed.
type failedReads struct {
	*recorder
	failed atomic.Int64
}

func (f *failedReads) OriginRead(reason string, d time.Duration, err error) {
	f.recorder.OriginRead(reason, d, err)
	if err != nil {
		f.failed.Add(1)
	}
}

// TestBatchHydrationWaitsOneDeadline sends a batch of three cold counters
// to an origin whose LoadMany never answers: the batch waits
// OriginTimeout once, and admits locally; a request on one of them that
// starts meanwhile waits for the same read, not a read of its own
// (virtual time).
func TestBatchHydrationWaitsOneDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 250 * time.Millisecond
		h := &hangingReads{}
		l, err := sluice.New(sluice.Config{Origin: h, OriginTimeout: timeout, FlushTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		rs := []sluice.Request{req("a", 10, 1, time.Hour, time.Time{}), req("b", 10, 1, time.Hour, time.Time{}), req("c", 10, 1, time.Hour, time.Time{})}
		start := time.Now()
		var single sluice.Response
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(timeout / 2)
			single, _ = l.Ratelimit(context.Background(), rs[1])
		})
		out, err := l.RatelimitMany(context.Background(), rs)
		if elapsed := time.Since(start); err != nil || elapsed != timeout || !out[0].Success || !out[2].Success {
			t.Errorf("batch on a hanging origin: %+v, %v after %v; want local admissions after %v", out, err, elapsed, timeout)
		}
		wg.Wait()
		if !single.Success || h.reads.Load() != 1 {
			t.Errorf("request beside the batch: %+v after %d origin reads; want an admission after the batch's one", single, h.reads.Load())
		}
	})
}

// hangingReads is a hangingOrigin that counts its reads (Load and
// LoadMany) apart from its other calls (the replays of what was admitted).
type hangingReads struct {
	hangingOrigin
	reads atomic.Int32
}

func (h *hangingReads) Load(ctx context.Context, k origin.Key, seq int64) (origin.Counts, error) {
	h.reads.Add(1)
	return h.hangingOrigin.Load(ctx, k, seq)
}

func (h *hangingReads) LoadMany(ctx context.Context, cells []origin.Cell) ([]origin.Counts, error) {
	h.reads.Add(1)
	return h.hangingOrigin.LoadMany(ctx, cells)
}
