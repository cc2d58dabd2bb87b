package sluice_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newLimiter(t testing.TB, cfg sluice.Config) *sluice.Limiter {
	t.Helper()
	l, err := sluice.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// newDriven returns a limiter for cfg whose background rounds the test
// drives through o and the handle, closed when t ends.
func newDriven(t testing.TB, cfg sluice.Config, o drive.Options) (*sluice.Limiter, drive.Handle) {
	t.Helper()
	l, h, err := drive.New[*sluice.Limiter](cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, h
}

func at(ms int64) time.Time { return time.UnixMilli(ms) }

func req(id string, limit, cost int64, d time.Duration, t time.Time) sluice.Request {
	return sluice.Request{Namespace: "ns", Identifier: id, Limit: limit, Duration: d, Cost: cost, Time: t}
}

// TestSeedExamples pins worked examples of the decision rule of
// docs/decisions.md as sequences of requests on a fresh limiter.
func TestSeedExamples(t *testing.T) {
	type step struct {
		r    sluice.Request
		want sluice.Response
	}
	const s = time.Second
	tests := []struct {
		name  string
		steps []step
	}{
		{"9 then 1 at limit 10 passes with 0 remaining", []step{
			{req("u", 10, 9, s, at(10_000)), sluice.Response{true, 10, 1, 9, at(11_000)}},
			{req("u", 10, 1, s, at(10_500)), sluice.Response{true, 10, 0, 10, at(11_000)}},
			{req("u", 10, 1, s, at(10_600)), sluice.Response{false, 10, 0, 10, at(11_000)}},
		}},
		{"prev 10 at 50% elapsed plus cur 5 plus cost 1 is denied", []step{
			{req("u", 20, 10, s, at(10_000)), sluice.Response{true, 20, 10, 10, at(11_000)}},
			{req("u", 10, 5, s, at(11_000)), sluice.Response{false, 10, 0, 10, at(12_000)}},
			{req("u", 20, 5, s, at(11_000)), sluice.Response{true, 20, 5, 15, at(12_000)}},
			{req("u", 10, 1, s, at(11_500)), sluice.Response{false, 10, 0, 10, at(12_000)}},
			{req("u", 10, 0, s, at(11_500)), sluice.Response{true, 10, 0, 10, at(12_000)}},
		}},
		{"the previous window decays linearly", []step{
			{req("u", 10, 10, s, at(0)), sluice.Response{true, 10, 0, 10, at(1000)}},
			{req("u", 10, 0, s, at(1000)), sluice.Response{true, 10, 0, 10, at(2000)}},
			{req("u", 10, 0, s, at(1250)), sluice.Response{true, 10, 3, 7, at(2000)}},
			{req("u", 10, 4, s, at(1700)), sluice.Response{true, 10, 3, 7, at(2000)}},
			{req("u", 10, 0, s, at(2000)), sluice.Response{true, 10, 6, 4, at(3000)}},
			{req("u", 10, 0, s, at(3000)), sluice.Response{true, 10, 10, 0, at(4000)}},
		}},
		{"limit 0 denies cost and allows a peek", []step{
			{req("u", 0, 1, s, at(5)), sluice.Response{false, 0, 0, 0, at(1000)}},
			{req("u", 0, 0, s, at(5)), sluice.Response{true, 0, 0, 0, at(1000)}},
		}},
		{"the limit is not part of the identity", []step{
			{req("u", 100, 60, s, at(0)), sluice.Response{true, 100, 40, 60, at(1000)}},
			{req("u", 50, 1, s, at(1)), sluice.Response{false, 50, 0, 60, at(1000)}},
		}},
		{"the duration is part of the identity", []step{
			{req("u", 5, 5, s, at(0)), sluice.Response{true, 5, 0, 5, at(1000)}},
			{req("u", 5, 5, 2*s, at(0)), sluice.Response{true, 5, 0, 5, at(2000)}},
		}},
		{"huge limits stay exact", []step{
			{req("u", math.MaxInt64, math.MaxInt64-1, s, at(0)), sluice.Response{true, math.MaxInt64, 1, math.MaxInt64 - 1, at(1000)}},
			{req("u", math.MaxInt64, 2, s, at(1)), sluice.Response{false, math.MaxInt64, 1, math.MaxInt64 - 1, at(1000)}},
			{req("u", math.MaxInt64, 0, s, at(1000)), sluice.Response{true, math.MaxInt64, 1, math.MaxInt64 - 1, at(2000)}},
			{req("u", math.MaxInt64, 0, s, at(1999)), sluice.Response{true, math.MaxInt64, math.MaxInt64 - math.MaxInt64/1000, math.MaxInt64 / 1000, at(2000)}},
			{req("u", math.MaxInt64, 0, s, at(1500)), sluice.Response{true, math.MaxInt64, math.MaxInt64/2 + 1, math.MaxInt64 / 2, at(2000)}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, sluice.Config{})
			for i, st := range tc.steps {
				got, err := l.Ratelimit(context.Background(), st.r)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got != st.want {
					t.Fatalf("step %d (%+v):\n got %+v\nwant %+v", i, st.r, got, st.want)
				}
			}
		})
	}
}

func TestInvalidRequests(t *testing.T) {
	ok := req("u", 10, 1, time.Second, at(0))
	tests := []struct {
		name   string
		mutate func(*sluice.Request)
	}{
		{"empty namespace", func(r *sluice.Request) { r.Namespace = "" }},
		{"empty identifier", func(r *sluice.Request) { r.Identifier = "" }},
		{"negative limit", func(r *sluice.Request) { r.Limit = -1 }},
		{"negative cost", func(r *sluice.Request) { r.Cost = -1 }},
		{"zero duration", func(r *sluice.Request) { r.Duration = 0 }},
		{"sub-millisecond duration", func(r *sluice.Request) { r.Duration = 999 * time.Microsecond }},
		{"negative duration", func(r *sluice.Request) { r.Duration = -time.Second }},
		{"time before the epoch", func(r *sluice.Request) { r.Time = time.UnixMilli(-1) }},
	}
	l := newLimiter(t, sluice.Config{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.mutate(&r)
			if _, err := l.Ratelimit(context.Background(), r); !errors.Is(err, sluice.ErrInvalidRequest) {
				t.Fatalf("Ratelimit error = %v, want ErrInvalidRequest", err)
			}
			_, err := l.RatelimitMany(context.Background(), []sluice.Request{ok, r})
			if !errors.Is(err, sluice.ErrInvalidRequest) {
				t.Fatalf("RatelimitMany error = %v, want ErrInvalidRequest", err)
			}
		})
	}
	// Nothing above was counted, not even the valid request of the batches.
	got, err := l.Ratelimit(context.Background(), func() sluice.Request { r := ok; r.Cost = 0; return r }())
	if err != nil || got.Current != 0 {
		t.Fatalf("after invalid requests: %+v, %v; want Current 0", got, err)
	}
}

func TestClosed(t *testing.T) {
	l := newLimiter(t, sluice.Config{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Ratelimit(context.Background(), req("u", 1, 1, time.Second, at(0))); !errors.Is(err, sluice.ErrClosed) {
		t.Fatalf("Ratelimit after Close: %v, want ErrClosed", err)
	}
}

// TestConcurrentAdmitsExactlyLimit hits one counter at one instant from many
// goroutines: exactly limit units pass.
func TestConcurrentAdmitsExactlyLimit(t *testing.T) {
	tests := []struct {
		name    string
		workers int
		each    int
		limit   int64
		cost    int64
		batch   bool
	}{
		{"single requests", 16, 500, 3000, 1, false},
		{"cost 3", 8, 400, 1000, 3, false},
		{"batches of two", 8, 300, 1000, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, sluice.Config{})
			r := req("hot", tc.limit, tc.cost, time.Minute, at(60_000))
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range tc.workers {
				wg.Go(func() {
					for range tc.each {
						if tc.batch {
							res, err := l.RatelimitMany(context.Background(), []sluice.Request{r, r})
							if err != nil {
								t.Error(err)
								return
							}
							if res[0].Success && res[1].Success {
								admitted.Add(2 * tc.cost)
							}
							continue
						}
						res, err := l.Ratelimit(context.Background(), r)
						if err != nil {
							t.Error(err)
							return
						}
						if res.Success {
							admitted.Add(tc.cost)
						}
					}
				})
			}
			wg.Wait()
			want := tc.limit / tc.cost * tc.cost
			if tc.batch {
				want = tc.limit / (2 * tc.cost) * 2 * tc.cost
			}
			if got := admitted.Load(); got != want {
				t.Fatalf("admitted %d units, want exactly %d", got, want)
			}
			peek := r
			peek.Cost = 0
			if res, _ := l.Ratelimit(context.Background(), peek); res.Current != want {
				t.Fatalf("counter holds %d, want %d", res.Current, want)
			}
		})
	}
}

// countingOrigin wraps a real origin and counts the calls made to it.
type countingOrigin struct {
	origin.Origin
	loads, applies, decides atomic.Int64
}

func (c *countingOrigin) Load(ctx context.Context, k origin.Key, seq int64) (origin.Counts, error) {
	c.loads.Add(1)
	return c.Origin.Load(ctx, k, seq)
}

func (c *countingOrigin) Apply(ctx context.Context, ds []origin.Delta) ([]origin.Total, error) {
	c.applies.Add(1)
	return c.Origin.Apply(ctx, ds)
}

func (c *countingOrigin) Decide(ctx context.Context, ch origin.Check) (origin.Verdict, error) {
	c.decides.Add(1)
	return c.Origin.Decide(ctx, ch)
}

// TestStrictModeDecidesAtOrigin checks that after a denial, and until t+d
// across the cell rollover, a request the local view would admit is decided
// by the origin, while denials and peeks never wait on it; and that a cost
// above the limit does not start strict mode.
func TestStrictModeDecidesAtOrigin(t *testing.T) {
	store := &countingOrigin{Origin: memory.New(nil)}
	l := newLimiter(t, sluice.Config{Origin: store, RefreshAfter: time.Hour})
	ctx := context.Background()
	const d = time.Second
	steps := []struct {
		name        string
		cost, ms    int64
		success     bool
		loads, decs int64
	}{
		{"cold counter hydrates", 1, 10_000, true, 1, 0},
		{"warm counter", 1, 10_100, true, 0, 0},
		{"cost above the limit", 5, 10_200, false, 0, 0},
		{"no strict mode after it", 0, 10_300, true, 0, 0},
		{"third unit denied: strict until 11_400", 1, 10_400, false, 0, 0},
		{"strict denial is local", 1, 10_500, false, 0, 0},
		{"strict peek is local", 0, 10_999, true, 0, 0},
		{"strict, previous cell still weighs 2", 1, 11_000, false, 0, 0}, // denied locally: the new cell is not read
		{"strict admission goes to the origin", 1, 11_399, true, 1, 1},   // the cell hydrates; prev weighs floor(2*601/1000) = 1
		{"strict mode over: local again", 0, 11_400, true, 0, 0},
	}
	for _, st := range steps {
		loads, decs := store.loads.Load(), store.decides.Load()
		res, err := l.Ratelimit(ctx, req("u", 2, st.cost, d, at(st.ms)))
		if err != nil {
			t.Fatal(err)
		}
		if res.Success != st.success {
			t.Errorf("%s: success %v, want %v", st.name, res.Success, st.success)
		}
		if n := store.loads.Load() - loads; n != st.loads {
			t.Errorf("%s: %d origin reads, want %d", st.name, n, st.loads)
		}
		if n := store.decides.Load() - decs; n != st.decs {
			t.Errorf("%s: %d origin decisions, want %d", st.name, n, st.decs)
		}
	}
}

// TestLimitersConvergeThroughOrigin has two limiters share one origin: what
// one admitted is counted by the other, and a fresh limiter (a restarted
// process) hydrates it instead of handing out a new quota.
func TestLimitersConvergeThroughOrigin(t *testing.T) {
	store := memory.New(nil)
	ctx := context.Background()
	r := req("u", 10, 1, time.Minute, at(120_000))

	a := newLimiter(t, sluice.Config{Origin: store})
	for range 10 {
		if res, _ := a.Ratelimit(ctx, r); !res.Success {
			t.Fatal("limiter a denied within its limit")
		}
	}
	if err := a.Close(); err != nil { // flushes the replay
		t.Fatal(err)
	}
	restarted := newLimiter(t, sluice.Config{Origin: store})
	res, err := restarted.Ratelimit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Success || res.Current != 10 {
		t.Fatalf("restarted limiter: %+v, want a denial at Current 10", res)
	}
}

// TestReplayIsLossless accepts increments from many goroutines on many cells
// and checks that, after Close, the origin holds exactly what was accepted.
func TestReplayIsLossless(t *testing.T) {
	store := &countingOrigin{Origin: memory.New(nil)}
	l, err := sluice.New(sluice.Config{Origin: store, ReplayWorkers: 3, ReplayBatch: 7})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"}
	var accepted [11]atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := (w + i) % len(ids)
				res, err := l.Ratelimit(context.Background(), req(ids[k], 1<<40, 1+int64(i%3), time.Hour, at(3_600_000)))
				if err != nil {
					t.Error(err)
					return
				}
				if res.Success {
					accepted[k].Add(1 + int64(i%3))
				}
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for k, id := range ids {
		counts, err := store.Load(context.Background(), origin.Key{Namespace: "ns", Identifier: id, Duration: time.Hour}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if counts.Current != accepted[k].Load() {
			t.Errorf("origin holds %d for %s, accepted %d", counts.Current, id, accepted[k].Load())
		}
	}
	if a := store.applies.Load(); a == 0 || a > 16000/10 {
		t.Errorf("%d origin writes for 16000 increments: replay did not coalesce", a)
	}
}

// TestWarmDecisionDoesNotAllocate guards the hot path: a warm decision, with
// or without an origin, with the limiter's clock or the request's time,
// allocates nothing.
func TestWarmDecisionDoesNotAllocate(t *testing.T) {
	tests := []struct {
		name string
		cfg  sluice.Config
		at   time.Time
	}{
		{"embedded default, limiter's clock", sluice.Config{}, time.Time{}},
		{"embedded default, request time", sluice.Config{}, time.Now()},
		{"with an origin, limiter's clock", sluice.Config{Origin: memory.New(nil)}, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, tc.cfg)
			ctx := context.Background()
			r := req("warm", 1<<40, 1, time.Hour, tc.at)
			if _, err := l.Ratelimit(ctx, r); err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(1000, func() { _, _ = l.Ratelimit(ctx, r) }); n != 0 {
				t.Fatalf("%v allocations per warm decision, want 0", n)
			}
		})
	}
}

// TestReplayDrivenByTicks checks that with replay ticks of its own nothing
// is replayed until the caller asks, by a tick or by a flush.
func TestReplayDrivenByTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &countingOrigin{Origin: memory.New(nil)}
		ticks := make(chan time.Time)
		// OriginMargin off: nothing is parked, every round replays what is dirty.
		l, h := newDriven(t, sluice.Config{Origin: store, RefreshAfter: time.Hour, OriginMargin: -1}, drive.Options{ReplayTicks: ticks})
		ctx := context.Background()
		r := req("driven", 100, 1, time.Hour, at(3_600_000))
		for range 5 {
			if _, err := l.Ratelimit(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if n := store.applies.Load(); n != 0 {
			t.Fatalf("%d replays before any tick", n)
		}
		h.Flush()
		if n := store.applies.Load(); n != 1 {
			t.Fatalf("%d replays after Flush, want 1", n)
		}
		counts, err := store.Load(ctx, origin.Key{Namespace: r.Namespace, Identifier: r.Identifier, Duration: r.Duration}, 1)
		if err != nil || counts.Current != 5 {
			t.Fatalf("origin holds %+v, %v after Flush; want 5", counts, err)
		}
		if _, err := l.Ratelimit(ctx, r); err != nil {
			t.Fatal(err)
		}
		ticks <- time.Time{} // one round, on the loop's goroutine
		synctest.Wait()
		if n := store.applies.Load(); n != 2 {
			t.Fatalf("%d replays after the tick, want 2", n)
		}
	})
}
