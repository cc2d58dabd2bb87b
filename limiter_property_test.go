package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"pgregory.net/rapid"
)

// epoch is an arbitrary, realistic start time for generated workloads.
var epoch = time.UnixMilli(1_700_000_000_000)

var durations = []time.Duration{
	time.Millisecond, 7 * time.Millisecond, time.Second, time.Minute,
	time.Hour, 30 * 24 * time.Hour,
}

// genRequest draws a request on one of a few identities, with limits from 0
// to 10^12 and costs from 0 to limit+2.
func genRequest(t *rapid.T, now time.Time, label string) sluice.Request {
	limit := rapid.OneOf(
		rapid.Just(int64(0)), rapid.Just(int64(1)), rapid.Int64Range(2, 20),
		rapid.Just(int64(1_000_000_000_000)),
	).Draw(t, label+"limit")
	var cost int64
	if limit > 100 {
		cost = rapid.OneOf(rapid.Int64Range(0, 5), rapid.Int64Range(limit/4, limit+2)).Draw(t, label+"cost")
	} else {
		cost = rapid.Int64Range(0, limit+2).Draw(t, label+"cost")
	}
	return sluice.Request{
		Workspace:  rapid.SampledFrom([]string{"", "ws"}).Draw(t, label+"ws"),
		Namespace:  "ns",
		Identifier: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, label+"id"),
		Limit:      limit,
		Duration:   rapid.SampledFrom(durations).Draw(t, label+"duration"),
		Cost:       cost,
		Time:       now,
	}
}

// advance moves time forward: not at all, by a millisecond, onto the next
// cell boundary of some window, by a few windows, or by a random amount.
func advance(t *rapid.T, now time.Time) time.Time {
	d := rapid.SampledFrom(durations).Draw(t, "step window")
	ms, dm := now.UnixMilli(), d.Milliseconds()
	switch rapid.IntRange(0, 5).Draw(t, "step kind") {
	case 0:
		return now
	case 1:
		return now.Add(time.Millisecond)
	case 2: // exactly onto the next boundary
		return time.UnixMilli((ms/dm + 1) * dm)
	case 3: // one millisecond before the next boundary
		return time.UnixMilli((ms/dm+1)*dm - 1)
	case 4: // several windows
		return now.Add(time.Duration(rapid.IntRange(1, 4).Draw(t, "windows")) * d)
	default:
		return now.Add(time.Duration(rapid.Int64Range(0, dm).Draw(t, "ms")) * time.Millisecond)
	}
}

// TestMatchesReferenceModel drives the engine (embedded default) and the
// independent model with the same random workload and compares every field
// of every response.
//
// The files under testdata/rapid/TestMatchesReferenceModel are workloads
// that once failed; rapid replays every one of them before its random cases
// (they pass: run with -v to see nothing is ignored).
func TestMatchesReferenceModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l, err := sluice.New(sluice.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		m := newModel()
		ctx := context.Background()
		now := epoch
		for step := range rapid.IntRange(1, 200).Draw(t, "steps") {
			now = advance(t, now)
			if rapid.IntRange(0, 4).Draw(t, "batch?") == 0 {
				rs := make([]sluice.Request, rapid.IntRange(1, 4).Draw(t, "batch size"))
				for i := range rs {
					rs[i] = genRequest(t, now, "batch ")
				}
				got, err := l.RatelimitMany(ctx, rs)
				if err != nil {
					t.Fatalf("step %d: RatelimitMany: %v", step, err)
				}
				want := m.limitMany(rs)
				for i := range rs {
					if got[i] != want[i] {
						t.Fatalf("step %d: batch item %d %+v:\n got %+v\nwant %+v", step, i, rs[i], got[i], want[i])
					}
				}
				continue
			}
			r := genRequest(t, now, "")
			got, err := l.Ratelimit(ctx, r)
			if err != nil {
				t.Fatalf("step %d: Ratelimit: %v", step, err)
			}
			if want := m.limit(r); !got.Reset.Equal(want.Reset) || got.Success != want.Success ||
				got.Current != want.Current || got.Remaining != want.Remaining || got.Limit != want.Limit {
				t.Fatalf("step %d: %+v:\n got %+v\nwant %+v", step, r, got, want)
			}
		}
	})
}
