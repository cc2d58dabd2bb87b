package sluice_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin/memory"
)

// BenchmarkRatelimitMany decides batches of 1 and 3 requests as the Envoy
// RLS sends them: each batch a value of 1,000, each request of a batch a
// counter of its own (keys k1, k2, k3 of that value), all on one instant
// so that no window rolls over during the run. passing batches are far
// under their limits; denied ones are over the first request's limit, and
// roll back (mostly denied, as tools/rlsload's edge-denied). With origin
// memory the limiter has an in-process origin, as on Redis: every counter
// is hydrated once, before the measurement.
func BenchmarkRatelimitMany(b *testing.B) {
	const values = 1000
	cases := []struct {
		name   string
		origin bool
		limit  int64
	}{
		{name: "passing", limit: benchLimit},
		{name: "denied", limit: 1},
		{name: "passing/origin=memory", origin: true, limit: benchLimit},
	}
	for _, c := range cases {
		for _, n := range []int{1, 3} {
			b.Run(fmt.Sprintf("%s/descriptors=%d", c.name, n), func(b *testing.B) {
				cfg := sluice.Config{}
				if c.origin {
					cfg.Origin = memory.New(nil)
				}
				l := newLimiter(b, cfg)
				batches := manyBatches(values, n, c.limit, time.Now())
				ctx := context.Background()
				for _, rs := range batches { // hydrates, and spends the denied limits
					if _, err := l.RatelimitMany(ctx, rs); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if _, err := l.RatelimitMany(ctx, batches[i%values]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// manyBatches returns values batches of n requests at now: batch i holds
// the counters k1 to kn of value i, each limited to limit per second.
func manyBatches(values, n int, limit int64, now time.Time) [][]sluice.Request {
	batches := make([][]sluice.Request, values)
	for i := range batches {
		v := "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
		for d := range n {
			batches[i] = append(batches[i], sluice.Request{Workspace: "envoy rls:edge", Namespace: "edge",
				Identifier: "k" + strconv.Itoa(d+1) + "=" + v, Limit: limit, Duration: time.Second, Cost: 1, Time: now})
		}
	}
	return batches
}
