package sluice_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/redis"
)

// These tests run limiters against a real Redis: separate Limiter values,
// each with its own client and origin, as separate processes would be.

// regionNode is one limiter of a region and the Redis origin behind it.
type regionNode struct {
	*sluice.Limiter
	origin *redis.Origin
}

func newRegionNode(t testing.TB, addr string, cfg sluice.Config) regionNode {
	t.Helper()
	client, err := redis.NewClient("redis://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	o, err := redis.New(redis.Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Origin = o
	l, err := sluice.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = l.Close()
		_ = o.Close()
		_ = client.Close()
	})
	return regionNode{Limiter: l, origin: o}
}

// uniqueWorkspace isolates a test's counters on the shared Redis.
func uniqueWorkspace(t testing.TB) string {
	return t.Name() + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// TestRegionAccuracy load-balances a stream at 10× the limit randomly over
// several limiters sharing one Redis and compares the total they admit with
// what the reference model admits for the merged stream.
func TestRegionAccuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time load against Redis")
	}
	addr := testenv.RedisAddr(t)
	tests := []struct {
		nodes     int
		limit     int64
		window    time.Duration
		run       time.Duration
		tolerance float64
	}{
		{3, 50, 5 * time.Second, 25 * time.Second, 0.02}, // small limit: a longer run, so one request is not 1%
		{3, 1000, 5 * time.Second, 12 * time.Second, 0.02},
		{3, 300, 10 * time.Second, 12 * time.Second, 0.02},
		{9, 200, 5 * time.Second, 12 * time.Second, 0.05},
	}
	for _, tc := range tests {
		name := fmt.Sprintf("%d nodes, %d per %v", tc.nodes, tc.limit, tc.window)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			nodes := make([]regionNode, tc.nodes)
			for i := range nodes {
				nodes[i] = newRegionNode(t, addr, sluice.Config{})
			}
			ws := uniqueWorkspace(t)
			rng := rand.New(rand.NewPCG(uint64(tc.limit), uint64(tc.nodes)))
			m := newModel()
			ctx := context.Background()
			rate := 10 * float64(tc.limit) / tc.window.Seconds()
			var engine, reference, sent int
			start := time.Now()
			for time.Since(start) < tc.run {
				for due := int(time.Since(start).Seconds() * rate); sent < due; sent++ {
					r := sluice.Request{Workspace: ws, Namespace: "accuracy", Identifier: "user",
						Limit: tc.limit, Duration: tc.window, Cost: 1, Time: time.Now()}
					res, err := nodes[rng.IntN(len(nodes))].Ratelimit(ctx, r)
					if err != nil {
						t.Fatal(err)
					}
					if res.Success {
						engine++
					}
					if m.limit(r).Success {
						reference++
					}
				}
				time.Sleep(time.Millisecond)
			}
			deviation := float64(engine-reference) / float64(reference)
			t.Logf("%d requests: limiters admitted %d, reference model %d (%+.2f%%)", sent, engine, reference, 100*deviation)
			if deviation > tc.tolerance || deviation < -tc.tolerance {
				t.Fatalf("admitted %d, reference %d: deviation %+.2f%% beyond ±%.0f%%", engine, reference, 100*deviation, 100*tc.tolerance)
			}
		})
	}
}

// TestRestartedNodeStillDenies uses up a limit on one limiter, closes it (a
// restart), and asks a new limiter on the same Redis.
func TestRestartedNodeStillDenies(t *testing.T) {
	addr := testenv.RedisAddr(t)
	ws := uniqueWorkspace(t)
	r := sluice.Request{Workspace: ws, Namespace: "restart", Identifier: "user", Limit: 20, Duration: time.Minute, Cost: 1}
	first := newRegionNode(t, addr, sluice.Config{})
	for i := range 20 {
		if res, err := first.Ratelimit(context.Background(), r); err != nil || !res.Success {
			t.Fatalf("request %d: %+v %v", i, res, err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	restarted := newRegionNode(t, addr, sluice.Config{})
	res, err := restarted.Ratelimit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Success || res.Current < 20 {
		t.Fatalf("restarted limiter answered %+v, want a denial at Current >= 20", res)
	}
}

// TestRegionFaults injects faults between a limiter and a Redis of the test's
// own while load runs: no caller ever sees an error, no decision waits longer
// than the read timeout allows, and once the fault is gone Redis holds
// exactly the accepted increments, without a restart of the limiter.
//
// Exactly: a replay that timed out or lost its reply after it ran in Redis
// (latency above the replay timeout, a reset, connections dropped with a
// call in flight) is sent again, and a write carries the writer's whole
// count, so Redis counts it once. Before writes carried whole counts, Redis
// held more than was accepted after such faults (one cell's coalesced
// delta of 19 increments counted twice when the connections dropped). Even
// a Redis restarted empty ends with every accepted increment: the next
// write of each cell carries all of them.
func TestRegionFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection against a real Redis")
	}
	const readTimeout = 100 * time.Millisecond
	tests := []struct {
		name string
		// fault starts the fault and returns the function that ends it.
		fault func(p *testenv.Proxy, s *testenv.RedisServer) (end func())
	}{
		{"latency 1s", func(p *testenv.Proxy, _ *testenv.RedisServer) func() { return p.Latency(time.Second) }},
		{"latency just above the timeouts", func(p *testenv.Proxy, _ *testenv.RedisServer) func() {
			return p.Latency(readTimeout + 30*time.Millisecond)
		}},
		{"redis down", func(p *testenv.Proxy, _ *testenv.RedisServer) func() { p.Down(); return p.Up }},
		{"connection reset", func(p *testenv.Proxy, _ *testenv.RedisServer) func() { return p.ResetPeer() }},
		{"redis restart", func(_ *testenv.Proxy, s *testenv.RedisServer) func() { s.Stop(); return s.Start }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each on a Redis and a proxy of its own; most of its time waits on the fault and the replays
			server := testenv.StartRedis(t)
			proxy := testenv.NewProxy(t, server.Addr)
			l := &faultLoad{node: newRegionNode(t, proxy.Addr(), sluice.Config{OriginTimeout: readTimeout, ReplayTimeout: readTimeout})}
			l.run(t, 300*time.Millisecond, "")
			end := tc.fault(proxy, server)
			l.latencies = l.latencies[:0]
			l.run(t, 2*time.Second, "")
			l.run(t, 200*time.Millisecond, "-cold") // cold counters while the fault lasts
			slices.Sort(l.latencies)
			p99, worst := l.latencies[len(l.latencies)*99/100], l.latencies[len(l.latencies)-1]
			t.Logf("during the fault: %d decisions, p50 %v, p99 %v, max %v, breaker %v",
				len(l.latencies), l.latencies[len(l.latencies)/2], p99, worst, l.node.origin.BreakerState())
			if worst > 5*readTimeout {
				t.Fatalf("a decision took %v during the fault; reads are bounded by %v", worst, readTimeout)
			}
			end()
			l.run(t, 300*time.Millisecond, "")
			// Every accepted increment reaches Redis once it is back, without
			// a restart of the limiter.
			l.checkInRedis(t, server.Addr, 15*time.Second)
		})
	}
}

// faultLoad is TestRegionFaults' load on one node: 20 counters, what each
// accepted, and every decision's latency.
type faultLoad struct {
	node      regionNode
	accepted  [20]atomic.Int64
	latencies []time.Duration
}

// faultID returns the identifier of counter i.
func faultID(i int) string { return "user-" + strconv.Itoa(i) }

// run sends a request to each counter (whose identifiers end with fresh)
// in turn, with a pause of a millisecond after each turn, for d. It counts
// the admissions of the counters whose identifiers end with nothing.
func (l *faultLoad) run(t *testing.T, d time.Duration, fresh string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := range l.accepted {
			start := time.Now()
			res, err := l.node.Ratelimit(context.Background(), sluice.Request{Namespace: "faults", Identifier: faultID(i) + fresh,
				Limit: 1 << 40, Duration: time.Hour, Cost: 1})
			l.latencies = append(l.latencies, time.Since(start))
			if err != nil {
				t.Fatalf("a caller got an error: %v", err)
			}
			if res.Success && fresh == "" {
				l.accepted[i].Add(1)
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// checkInRedis waits up to wait for the Redis at addr to hold each
// counter's accepted increments, and fails at once if it holds more.
func (l *faultLoad) checkInRedis(t *testing.T, addr string, wait time.Duration) {
	t.Helper()
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: addr})
	defer client.Close()
	seq := time.Now().UnixMilli() / time.Hour.Milliseconds()
	deadline := time.Now().Add(wait)
	for i := range l.accepted {
		want := l.accepted[i].Load()
		key := redis.CellKey(origin.Cell{Key: origin.Key{Namespace: "faults", Identifier: faultID(i), Duration: time.Hour}, Sequence: seq})
		for {
			got, err := client.HGet(ctx, key, "n").Int64()
			if err == nil && got > want {
				t.Fatalf("%s: Redis holds %d for %d accepted increments: counted twice", faultID(i), got, want)
			}
			if err == nil && got == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Redis holds %d (%v), want %d accepted increments", faultID(i), got, err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
