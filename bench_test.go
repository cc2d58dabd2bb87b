package sluice_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin/memory"
)

// benchLimit is high enough that every benchmark request is accepted: the
// accept path (check plus CAS) is the slower of the two.
const benchLimit = 1 << 50

// BenchmarkRatelimitWarm is one warm counter, serially. The request carries
// its time, so the figure is the engine's alone; the ...Clock variant adds
// the limiter reading time.Now.
func BenchmarkRatelimitWarm(b *testing.B) { benchWarm(b, sluice.Config{}) }

// BenchmarkRatelimitWarmOrigin is one warm counter far from its limit on a
// limiter with an origin (in memory): the decision is local, and its
// increment enters the count and the writer's count under the cell's lock,
// then is queued for replay. Compare it with BenchmarkRatelimitWarm.
func BenchmarkRatelimitWarmOrigin(b *testing.B) { benchWarm(b, sluice.Config{Origin: memory.New(nil)}) }

// benchWarm decides one warm counter far from its limit, serially, on a
// limiter made with cfg; the request carries its time.
func benchWarm(b *testing.B, cfg sluice.Config) {
	l := newLimiter(b, cfg)
	ctx := context.Background()
	r := req("warm", benchLimit, 1, time.Minute, time.Now())
	if _, err := l.Ratelimit(ctx, r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Ratelimit(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRatelimitWarmClock(b *testing.B) {
	l := newLimiter(b, sluice.Config{})
	ctx := context.Background()
	r := req("warm", benchLimit, 1, time.Minute, time.Time{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Ratelimit(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRatelimitWarmServer is one warm counter with a workspace and a
// namespace, as the server calls the limiter, on the limiter's own clock:
// compare it with BenchmarkXTimeRateAllow in the same run.
func BenchmarkRatelimitWarmServer(b *testing.B) {
	l := newLimiter(b, sluice.Config{})
	ctx := context.Background()
	r := sluice.Request{Workspace: "ws_3xPq8a1LmZk2", Namespace: "api.requests", Identifier: "user_2bX9fK1qW7",
		Limit: benchLimit, Duration: time.Minute, Cost: 1}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Ratelimit(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRatelimitWarmParallel runs GOMAXPROCS goroutines, each on its own
// warm counter (the common case: many users, one process).
func BenchmarkRatelimitWarmParallel(b *testing.B) {
	l := newLimiter(b, sluice.Config{})
	ctx := context.Background()
	now := time.Now()
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := req("warm-"+strconv.FormatInt(next.Add(1), 10), benchLimit, 1, time.Minute, now)
		for pb.Next() {
			if _, err := l.Ratelimit(ctx, r); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRatelimitWarmParallelOneCounter has every goroutine hit the same
// counter: the CAS contention worst case.
func BenchmarkRatelimitWarmParallelOneCounter(b *testing.B) {
	l := newLimiter(b, sluice.Config{})
	ctx := context.Background()
	r := req("hot", benchLimit, 1, time.Minute, time.Now())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Ratelimit(ctx, r); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// userIDs returns n distinct identifiers, made before any measurement.
func userIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	return ids
}

// BenchmarkDistinctIdentities decides each operation on a counter never seen
// before (the cold path: one cell created per operation), cycling through 1M
// identities with a fresh limiter for each million.
func BenchmarkDistinctIdentities(b *testing.B) {
	ids := userIDs(1_000_000)
	ctx := context.Background()
	now := time.Now()
	var l *sluice.Limiter
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%len(ids) == 0 {
			b.StopTimer()
			if l != nil {
				_ = l.Close()
			}
			l = newLimiter(b, sluice.Config{})
			b.StartTimer()
		}
		if _, err := l.Ratelimit(ctx, req(ids[i%len(ids)], benchLimit, 1, time.Minute, now)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeapPerCell fills a limiter with 1M active cells and reports the
// live heap they hold per cell. The identifier strings belong to the caller
// and are allocated before the measurement; add their size (16 bytes each
// here) for the total a server retains.
func BenchmarkHeapPerCell(b *testing.B) {
	const cells = 1_000_000
	ids := userIDs(cells)
	ctx := context.Background()
	now := time.Now()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l, err := sluice.New(sluice.Config{})
		if err != nil {
			b.Fatal(err)
		}
		for _, id := range ids {
			if _, err := l.Ratelimit(ctx, req(id, benchLimit, 1, time.Minute, now)); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/cells, "heapB/cell")
		runtime.KeepAlive(l)
		_ = l.Close()
	}
}

// BenchmarkRatelimitMany3 decides batches of three warm counters.
func BenchmarkRatelimitMany3(b *testing.B) {
	l := newLimiter(b, sluice.Config{})
	ctx := context.Background()
	now := time.Now()
	rs := []sluice.Request{
		req("a", benchLimit, 1, time.Minute, now),
		req("b", benchLimit, 1, time.Minute, now),
		req("c", benchLimit, 1, time.Hour, now),
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.RatelimitMany(ctx, rs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkXTimeRateAllow is golang.org/x/time/rate's Allow on one limiter,
// for comparison with BenchmarkRatelimitWarmClock (both read the clock).
func BenchmarkXTimeRateAllow(b *testing.B) {
	lim := rate.NewLimiter(rate.Limit(1e12), 1<<30) // never binding, but not the Inf short-cut
	b.ReportAllocs()
	for b.Loop() {
		lim.Allow()
	}
}

// BenchmarkXTimeRateAllowN is x/time/rate with the time passed in, for
// comparison with BenchmarkRatelimitWarm.
func BenchmarkXTimeRateAllowN(b *testing.B) {
	lim := rate.NewLimiter(rate.Limit(1e12), 1<<30)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		lim.AllowN(now, 1)
	}
}

// BenchmarkXTimeRateAllowParallel is x/time/rate on one limiter from
// GOMAXPROCS goroutines, for comparison with
// BenchmarkRatelimitWarmParallelOneCounter.
func BenchmarkXTimeRateAllowParallel(b *testing.B) {
	lim := rate.NewLimiter(rate.Limit(1e12), 1<<30) // never binding, but not the Inf short-cut
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			lim.Allow()
		}
	})
}
