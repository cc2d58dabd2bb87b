package sluice_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/global"
	globalmemory "github.com/sluicehq/sluice/global/memory"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// TestReport pins reports of usage after the fact as sequences of
// decisions ("limit") and reports ("report") on a fresh embedded limiter:
// a report is never denied, counts its whole cost past the limit, answers
// the state after it, and the requests after it are denied until the
// window lets them through.
func TestReport(t *testing.T) {
	type step struct {
		op   string // "limit" or "report"
		r    sluice.Request
		want sluice.Response
	}
	const s = time.Second
	tests := []struct {
		name  string
		steps []step
	}{
		{"a report past the limit counts whole and denies what follows", []step{
			{"limit", req("u", 10, 8, s, at(10_000)), sluice.Response{true, 10, 2, 8, at(11_000)}},
			{"report", req("u", 10, 5, s, at(10_100)), sluice.Response{true, 10, 0, 13, at(11_000)}},
			{"limit", req("u", 10, 1, s, at(10_200)), sluice.Response{false, 10, 0, 13, at(11_000)}},
			{"limit", req("u", 10, 0, s, at(10_200)), sluice.Response{false, 10, 0, 13, at(11_000)}},
		}},
		{"the window lets requests through again as the report fades", []step{
			{"report", req("u", 10, 30, s, at(10_000)), sluice.Response{true, 10, 0, 30, at(11_000)}},
			{"limit", req("u", 10, 1, s, at(11_500)), sluice.Response{false, 10, 0, 15, at(12_000)}},
			{"limit", req("u", 10, 1, s, at(11_700)), sluice.Response{true, 10, 0, 10, at(12_000)}},
			{"limit", req("u", 10, 1, s, at(12_000)), sluice.Response{true, 10, 8, 2, at(13_000)}},
		}},
		{"a report on an exhausted counter still counts", []step{
			{"limit", req("u", 3, 3, s, at(0)), sluice.Response{true, 3, 0, 3, at(1000)}},
			{"limit", req("u", 3, 1, s, at(1)), sluice.Response{false, 3, 0, 3, at(1000)}},
			{"report", req("u", 3, 4, s, at(2)), sluice.Response{true, 3, 0, 7, at(1000)}},
		}},
		{"a report within the limit answers what remains", []step{
			{"report", req("u", 100, 40, s, at(0)), sluice.Response{true, 100, 60, 40, at(1000)}},
			{"limit", req("u", 100, 60, s, at(1)), sluice.Response{true, 100, 0, 100, at(1000)}},
		}},
		{"a report of 0 counts nothing and passes even over the limit", []step{
			{"report", req("u", 5, 9, s, at(0)), sluice.Response{true, 5, 0, 9, at(1000)}},
			{"report", req("u", 5, 0, s, at(1)), sluice.Response{true, 5, 0, 9, at(1000)}},
		}},
		{"a limit of 0 counts reports too", []step{
			{"report", req("u", 0, 2, s, at(0)), sluice.Response{true, 0, 0, 2, at(1000)}},
			{"report", req("u", 0, 2, s, at(1)), sluice.Response{true, 0, 0, 4, at(1000)}},
		}},
		{"huge reports saturate", []step{
			{"report", req("u", 10, math.MaxInt64, s, at(0)), sluice.Response{true, 10, 0, math.MaxInt64, at(1000)}},
			{"report", req("u", 10, math.MaxInt64, s, at(1)), sluice.Response{true, 10, 0, math.MaxInt64, at(1000)}},
			{"limit", req("u", 10, 0, s, at(2)), sluice.Response{false, 10, 0, math.MaxInt64, at(1000)}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, sluice.Config{})
			for i, st := range tc.steps {
				call := l.Ratelimit
				if st.op == "report" {
					call = l.Report
				}
				got, err := call(context.Background(), st.r)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got != st.want {
					t.Fatalf("step %d (%s %+v):\n got %+v\nwant %+v", i, st.op, st.r, got, st.want)
				}
			}
		})
	}
}

// TestReportMany counts every report of a batch in order, whatever the
// limit says, and refuses a batch with an invalid request whole, naming
// its index.
func TestReportMany(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name    string
		batch   []sluice.Request
		want    []sluice.Response
		wantErr string // "": no error
	}{
		{"every report counts, later ones see earlier ones", []sluice.Request{
			req("a", 10, 6, s, at(0)), req("a", 10, 6, s, at(0)), req("b", 10, 1, s, at(0)),
		}, []sluice.Response{
			{true, 10, 4, 6, at(1000)}, {true, 10, 0, 12, at(1000)}, {true, 10, 9, 1, at(1000)},
		}, ""},
		{"an invalid request counts nothing", []sluice.Request{
			req("a", 10, 6, s, at(0)), req("a", 10, -1, s, at(0)),
		}, nil, "request 1: sluice: invalid request: cost -1 is negative"},
		{"an empty batch counts nothing", nil, []sluice.Response{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, sluice.Config{})
			got, err := l.ReportMany(context.Background(), tc.batch)
			if tc.wantErr != "" {
				if !errors.Is(err, sluice.ErrInvalidRequest) || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q wrapping ErrInvalidRequest", err, tc.wantErr)
				}
				if res, _ := l.Ratelimit(context.Background(), req("a", 10, 0, s, at(0))); res.Current != 0 {
					t.Fatalf("a refused batch counted %d", res.Current)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d answers, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("report %d:\n got %+v\nwant %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestReportRefusals: an invalid report is an error wrapping
// ErrInvalidRequest, as for Ratelimit, and a report after Close is
// ErrClosed.
func TestReportRefusals(t *testing.T) {
	ok := req("u", 10, 1, time.Second, at(0))
	tests := []struct {
		name   string
		mutate func(*sluice.Request)
		want   error
	}{
		{"empty namespace", func(r *sluice.Request) { r.Namespace = "" }, sluice.ErrInvalidRequest},
		{"empty identifier", func(r *sluice.Request) { r.Identifier = "" }, sluice.ErrInvalidRequest},
		{"negative limit", func(r *sluice.Request) { r.Limit = -1 }, sluice.ErrInvalidRequest},
		{"negative cost", func(r *sluice.Request) { r.Cost = -1 }, sluice.ErrInvalidRequest},
		{"sub-millisecond duration", func(r *sluice.Request) { r.Duration = time.Microsecond }, sluice.ErrInvalidRequest},
		{"time before the epoch", func(r *sluice.Request) { r.Time = time.UnixMilli(-1) }, sluice.ErrInvalidRequest},
	}
	l := newLimiter(t, sluice.Config{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.mutate(&r)
			if _, err := l.Report(context.Background(), r); !errors.Is(err, tc.want) {
				t.Fatalf("Report: %v, want %v", err, tc.want)
			}
			if _, err := l.ReportMany(context.Background(), []sluice.Request{ok, r}); !errors.Is(err, tc.want) || !strings.HasPrefix(err.Error(), "request 1: ") {
				t.Fatalf("ReportMany: %v, want request 1 wrapping %v", err, tc.want)
			}
		})
	}
	t.Run("after Close", func(t *testing.T) {
		l := newLimiter(t, sluice.Config{Origin: memory.New(nil)})
		_ = l.Close()
		if _, err := l.Report(context.Background(), ok); !errors.Is(err, sluice.ErrClosed) {
			t.Fatalf("Report: %v, want ErrClosed", err)
		}
		if _, err := l.ReportMany(context.Background(), []sluice.Request{ok}); !errors.Is(err, sluice.ErrClosed) {
			t.Fatalf("ReportMany: %v, want ErrClosed", err)
		}
	})
}

// decideCounter is a memory origin that counts its decisions.
type decideCounter struct {
	*memory.Store
	decides atomic.Int64
}

func (d *decideCounter) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	d.decides.Add(1)
	return d.Store.Decide(ctx, c)
}

// TestReportInStrictModeCountsLocally reports on a counter in strict mode
// (after a denial) and near its limit: the origin decides nothing for
// the reports (they are counted here and replayed), and the origin ends
// with every admitted and reported unit, once.
func TestReportInStrictModeCountsLocally(t *testing.T) {
	o := &decideCounter{Store: memory.New(nil)}
	l, h := newDriven(t, sluice.Config{Origin: o, RefreshAfter: time.Hour}, drive.Options{ReplayTicks: make(chan time.Time)})
	ctx := context.Background()
	now := time.Now()
	r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 10, Duration: time.Hour, Cost: 1, Time: now}
	admitted := spend(t, l, r, 12) // the last two are denied: strict mode
	if admitted != 10 {
		t.Fatalf("admitted %d of 10", admitted)
	}
	before := o.decides.Load()
	report := r
	report.Cost = 7
	for i := range 3 {
		res, err := l.Report(ctx, report)
		if err != nil || !res.Success || res.Current != 10+7*int64(i+1) || res.Remaining != 0 {
			t.Fatalf("report %d: %+v, %v", i, res, err)
		}
	}
	if n := o.decides.Load() - before; n != 0 {
		t.Fatalf("the origin decided %d times for reports", n)
	}
	h.Flush()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := originTotal(t, o.Store, r), admitted+3*7; got != want {
		t.Fatalf("the origin counts %d, want %d admitted and reported", got, want)
	}
}

// originTotal returns the origin's count of r's current cell.
func originTotal(t *testing.T, o origin.Origin, r sluice.Request) int64 {
	t.Helper()
	d := r.Duration.Milliseconds()
	counts, err := o.Load(context.Background(), origin.Key{Workspace: r.Workspace, Namespace: r.Namespace, Identifier: r.Identifier, Duration: r.Duration}, r.Time.UnixMilli()/d)
	if err != nil {
		t.Fatal(err)
	}
	return counts.Current
}

// TestReportsCountOnceUnderFaults reports from several goroutines while the
// origin loses the replies of replays that landed, and Close flushes what
// is left: the origin counts every reported unit once, and the other node
// of the region then denies the counter that the reports took over its
// limit.
func TestReportsCountOnceUnderFaults(t *testing.T) {
	f := newFaultyOrigin()
	f.lostApplies.Store(5)
	l := newLimiter(t, sluice.Config{Origin: f, ReplayInterval: time.Millisecond})
	r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 100, Duration: time.Hour, Cost: 3, Time: time.Now()}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				if _, err := l.Report(context.Background(), r); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.total(t, r); got != 4*25*3 {
		t.Fatalf("the origin counts %d for %d reported units", got, 4*25*3)
	}
	other := newLimiter(t, sluice.Config{Origin: f})
	check := r
	check.Cost = 1
	if res, err := other.Ratelimit(context.Background(), check); err != nil || res.Success || res.Current != 300 {
		t.Fatalf("the other node: %+v, %v; want denied at 300", res, err)
	}
}

// TestReportCloseRace closes limiters while batches of reports run: a
// batch that answers reaches the origin whole by Close's flush; one that
// answers ErrClosed is taken back, though a replay already on its way may
// have carried it (as for Ratelimit, see Limiter.Close): the origin holds
// every answered report, and no more than the batches told ErrClosed on
// top. It found the final flush stopping while a mark held a cell
// unqueued (TestFinalFlushWaitsForAMarkInFlight).
func TestReportCloseRace(t *testing.T) {
	for round := range 50 {
		o := memory.New(nil)
		l, err := sluice.New(sluice.Config{Origin: o})
		if err != nil {
			t.Fatal(err)
		}
		r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 5, Duration: time.Hour, Cost: 2, Time: time.Now()}
		var counted, refused atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 50 {
					_, err := l.ReportMany(context.Background(), []sluice.Request{r, r})
					switch {
					case err == nil:
						counted.Add(4)
					case errors.Is(err, sluice.ErrClosed):
						refused.Add(4)
					default:
						t.Errorf("round %d: %v", round, err)
					}
				}
			})
		}
		time.Sleep(time.Duration(round%4) * 100 * time.Microsecond)
		// Close may count as lost an increment that a batch racing it
		// takes back after the count (ErrNotFlushed); the origin's total
		// below tells what was lost.
		if err := l.Close(); err != nil && !errors.Is(err, sluice.ErrNotFlushed) {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		wg.Wait()
		if got := originTotal(t, o, r); got < counted.Load() || got > counted.Load()+refused.Load() {
			t.Fatalf("round %d: the origin counts %d, the answers %d (and %d refused)", round, got, counted.Load(), refused.Load())
		}
	}
}

// TestReportPublishedGlobally reports past the limit in one region: the
// global layer publishes the report like any increment, and the other
// region denies the counter after a few rounds.
func TestReportPublishedGlobally(t *testing.T) {
	const limit, d = 1000, 10 * time.Minute
	clock := &virtualClock{}
	clock.set(7000 * d.Milliseconds())
	store := &recordingStore{Store: globalmemory.New(), max: map[string]int64{}}
	regions := newRegions(t, 2, store, clock, sluice.GlobalConfig{DisableDenials: true}, drive.Options{})
	ctx := context.Background()
	if res, err := regions[0].Report(ctx, req("tokens", limit, 1500, d, time.Time{})); err != nil || res.Current != 1500 {
		t.Fatalf("report: %+v, %v", res, err)
	}
	for range 4 { // announce, learn R, publish, import
		syncAll(t, regions)
	}
	if got := store.maxOf("region-0", "tokens"); got != 1500 {
		t.Fatalf("region 0 published %d, want the 1500 reported", got)
	}
	res, err := regions[1].Ratelimit(ctx, req("tokens", limit, 1, d, time.Time{}))
	if err != nil || res.Success || res.Current != 1500 {
		t.Fatalf("region 1: %+v, %v; want denied at 1500", res, err)
	}
}

var _ global.Store = (*recordingStore)(nil)
