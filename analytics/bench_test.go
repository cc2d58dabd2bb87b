package analytics_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/analytics"
)

// BenchmarkRecord is the request path's share: queueing one decision,
// with a reader applying the queue every 4096 decisions (the embedder's
// Advance, whose cost is BenchmarkApply's).
func BenchmarkRecord(b *testing.B) {
	r, err := analytics.New(analytics.Config{})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		r.Record("ws_3xPq8a1LmZk2", "api.requests", "user_2bX9fK1qW7", true, now)
		if i++; i%4096 == 0 {
			b.StopTimer()
			r.Advance(now)
			b.StartTimer()
		}
	}
}

// BenchmarkRecordParallel is BenchmarkRecord from GOMAXPROCS goroutines on
// one queue; producers that find it full apply it themselves.
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
// analytics: the difference is what recording adds to a decision. The two
// run in one binary; interleave them with -count.
func BenchmarkDecision(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run("analytics="+strconv.FormatBool(on), func(b *testing.B) {
			l, err := sluice.New(sluice.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			rec, err := analytics.New(analytics.Config{})
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
					if i++; i%4096 == 0 {
						b.StopTimer()
						rec.Advance(now)
						b.StartTimer()
					}
				}
			}
		})
	}
}
