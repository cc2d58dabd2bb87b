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
// of every response. The workload mixes single requests, batches, and
// reports of usage after the fact (Report and ReportMany: counted
// whatever the limit, so counters go over their limits and the requests
// after them are denied until the window lets them through).
//
// The files under testdata/rapid/TestMatchesReferenceModel are workloads
// that once failed; rapid replays every one of them before its random cases
// (they pass: run with -v to see nothing is ignored). The operation is
// drawn from 0..7, which takes the same bits as the 0..4 those files were
// recorded with (values above 4 were rejected then and are reports now), so
// they replay as they were recorded.
func TestMatchesReferenceModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l, err := sluice.New(sluice.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		m := newModel()
		now := epoch
		for step := range rapid.IntRange(1, 200).Draw(t, "steps") {
			now = advance(t, now)
			switch rapid.IntRange(0, 7).Draw(t, "operation") {
			case 0:
				checkBatch(t, step, "RatelimitMany", genBatch(t, now, "batch "), l.RatelimitMany, m.limitMany)
			case 5:
				r := genRequest(t, now, "report ")
				checkOne(t, step, "Report", r, l.Report, m.report)
			case 6:
				checkBatch(t, step, "ReportMany", genBatch(t, now, "reports "), l.ReportMany, m.reportMany)
			default:
				checkOne(t, step, "Ratelimit", genRequest(t, now, ""), l.Ratelimit, m.limit)
			}
		}
	})
}

// genBatch draws a batch of 1 to 4 requests at now.
func genBatch(t *rapid.T, now time.Time, label string) []sluice.Request {
	rs := make([]sluice.Request, rapid.IntRange(1, 4).Draw(t, label+"size"))
	for i := range rs {
		rs[i] = genRequest(t, now, label)
	}
	return rs
}

// checkOne sends r to the engine's call and the model's, and compares
// every field of the answers.
func checkOne(t *rapid.T, step int, name string, r sluice.Request,
	engine func(context.Context, sluice.Request) (sluice.Response, error), model func(sluice.Request) sluice.Response) {
	got, err := engine(context.Background(), r)
	if err != nil {
		t.Fatalf("step %d: %s: %v", step, name, err)
	}
	if want := model(r); !got.Reset.Equal(want.Reset) || got.Success != want.Success ||
		got.Current != want.Current || got.Remaining != want.Remaining || got.Limit != want.Limit {
		t.Fatalf("step %d: %s %+v:\n got %+v\nwant %+v", step, name, r, got, want)
	}
}

// checkBatch is checkOne for a batch.
func checkBatch(t *rapid.T, step int, name string, rs []sluice.Request,
	engine func(context.Context, []sluice.Request) ([]sluice.Response, error), model func([]sluice.Request) []sluice.Response) {
	got, err := engine(context.Background(), rs)
	if err != nil {
		t.Fatalf("step %d: %s: %v", step, name, err)
	}
	want := model(rs)
	for i := range rs {
		if got[i] != want[i] {
			t.Fatalf("step %d: %s item %d %+v:\n got %+v\nwant %+v", step, name, i, rs[i], got[i], want[i])
		}
	}
}
