package analytics_test

import (
	"context"
	"math/bits"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/analytics"
)

// benchQueue is the queue of the serial benchmarks, the default's length.
const benchQueue = analytics.DefaultQueueSize

// applyOffTimer applies r's queue, outside the timer, every benchQueue
// calls: the benchmark measures recording only (applying is
// BenchmarkApply's), as sluice serve applies the queue on a goroutine of
// its own every 100 ms. With a nil r it only stops and starts the timer,
// whose own cost (it reads the memory statistics) the benchmark without
// analytics then pays alike.
func applyOffTimer(b *testing.B, r *analytics.Recorder, i *int, now time.Time) {
	if *i++; *i%benchQueue == 0 {
		b.StopTimer()
		if r != nil {
			r.Advance(now)
		}
		b.StartTimer()
	}
}

// BenchmarkRecord is the request path's share: queueing one decision.
func BenchmarkRecord(b *testing.B) {
	r, err := analytics.New(analytics.Config{QueueSize: benchQueue})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		r.Record("ws_3xPq8a1LmZk2", "api.requests", "user_2bX9fK1qW7", true, now)
		applyOffTimer(b, r, &i, now)
	}
}

// BenchmarkRecordParallel is BenchmarkRecord from GOMAXPROCS goroutines on
// one queue (the CAS on its tail moves between the cores). Nothing applies
// the queue: past its first DefaultQueueSize calls, every call finds it
// full and drops its decision (a load, no CAS), as decisions do when the
// goroutine that applies it is held up.
func BenchmarkRecordParallel(b *testing.B) {
	r, err := analytics.New(analytics.Config{})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Record("ws_3xPq8a1LmZk2", "api.requests", "user_2bX9fK1qW7", true, now)
		}
	})
}

// BenchmarkApply is the cost of applying one queued decision (Advance's
// share per decision), over 1,000 identifiers of one namespace.
func BenchmarkApply(b *testing.B) {
	r, err := analytics.New(analytics.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	now := time.Now()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		r.Record("ws", "api", ids[i%len(ids)], i%4 != 0, now)
		if i++; i%4096 == 0 {
			r.Advance(now)
		}
	}
}

// BenchmarkDecision is the warm library decision as the server makes it
// (BenchmarkRatelimitWarmServer of the root package), without and with
// analytics (the queue applied outside the timer, see applyOffTimer): the
// difference is what recording adds to a decision. Compare them within one
// run of the test binary, and across several runs.
func BenchmarkDecision(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run("analytics="+strconv.FormatBool(on), func(b *testing.B) {
			l, err := sluice.New(sluice.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			rec, err := analytics.New(analytics.Config{QueueSize: benchQueue})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			r := sluice.Request{Workspace: "ws_3xPq8a1LmZk2", Namespace: "api.requests", Identifier: "user_2bX9fK1qW7",
				Limit: 1 << 50, Duration: time.Minute, Cost: 1}
			now := time.Now() // the server passes the time it read at the request's start
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				res, err := l.Ratelimit(ctx, r)
				if err != nil {
					b.Fatal(err)
				}
				if on {
					rec.Record(r.Workspace, r.Namespace, r.Identifier, res.Success, now)
					applyOffTimer(b, rec, &i, now)
				} else {
					applyOffTimer(b, nil, &i, now)
				}
			}
		})
	}
}

// BenchmarkRecordUnapplied is BenchmarkRecordParallel timing each call, as
// when the goroutine that applies the queue is held up (it used to publish
// to the region's Redis in turn, and a frozen Redis held it for a second
// at a time): once the queue is full, every decision finds it so.
// p99.99-ns is the 99.99th percentile of a call's time, to a power of two
// (a call that applies the queue itself comes once in DefaultQueueSize);
// the clock reads around each call are counted in ns/op.
func BenchmarkRecordUnapplied(b *testing.B) {
	r, err := analytics.New(analytics.Config{})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	var (
		mu  sync.Mutex
		all [64]uint64 // calls by bits.Len64 of their nanoseconds
	)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var mine [64]uint64
		for pb.Next() {
			start := time.Now()
			r.Record("ws_3xPq8a1LmZk2", "api.requests", "user_2bX9fK1qW7", true, now)
			mine[bits.Len64(uint64(time.Since(start)))]++
		}
		mu.Lock()
		defer mu.Unlock()
		for i, n := range mine {
			all[i] += n
		}
	})
	var calls, seen uint64
	for _, n := range all {
		calls += n
	}
	for i, n := range all {
		if seen += n; seen*10_000 >= calls*9_999 {
			b.ReportMetric(float64(uint64(1)<<i), "p99.99-ns")
			break
		}
	}
}
