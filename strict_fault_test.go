package sluice_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/redis"
)

// callLog wraps an origin and records every synchronous call: for a
// strict-mode decision the instant it decides at (the request time of the
// batch's earliest request), and whether it failed.
type callLog struct {
	origin.Origin
	mu      sync.Mutex
	decides []loggedCall
	loads   []loggedCall
}

type loggedCall struct {
	at  int64 // Unix ms: the check's instant (Decide) or the call's start (Load)
	err error
}

func (c *callLog) Load(ctx context.Context, k origin.Key, seq int64) (origin.Counts, error) {
	start := time.Now().UnixMilli()
	counts, err := c.Origin.Load(ctx, k, seq)
	c.mu.Lock()
	c.loads = append(c.loads, loggedCall{start, err})
	c.mu.Unlock()
	return counts, err
}

func (c *callLog) Decide(ctx context.Context, ch origin.Check) (origin.Verdict, error) {
	v, err := c.Origin.Decide(ctx, ch)
	c.mu.Lock()
	c.decides = append(c.decides, loggedCall{ch.Seq*ch.Key.Duration.Milliseconds() + ch.Elapsed, err})
	c.mu.Unlock()
	return v, err
}

func (c *callLog) snapshot() (decides, loads []loggedCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.decides), slices.Clone(c.loads)
}

// TestHangingOriginInStrictMode puts one counter in strict mode, makes the
// real Redis behind it hang (toxiproxy adds 10 s of latency), and sends waves
// of 1,000 concurrent requests that the local view would admit, every half
// back-off period. Each strict-mode origin decision fails after OriginTimeout;
// the requests that queued behind it and every request until the back-off
// ends are decided locally. So the origin sees at most one decision per
// OriginBackoff (checked on the instants the limiter decides at, which the
// back-off is computed from), no other read, and no request waits much longer
// than one OriginTimeout.
func TestHangingOriginInStrictMode(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection against a real Redis")
	}
	const (
		timeout  = 150 * time.Millisecond
		backoff  = 400 * time.Millisecond
		waves    = 5
		perWave  = 1000
		slack    = time.Second // scheduling of 1,000 goroutines under the race detector on a busy 2-core machine (941 ms once, at load average 7); a hang would be 10 s
		lowLimit = 10
	)
	proxy := testenv.NewProxy(t, testenv.RedisAddr(t))
	client, err := redis.NewClient("redis://" + proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// A breaker that never opens during the test: the limiter's own back-off
	// is what must keep the calls down, not a fast failure.
	ro, err := redis.New(redis.Config{Client: client,
		Breaker: redis.BreakerConfig{ConsecutiveFailures: 1 << 20, MinRequests: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	calls := &callLog{Origin: ro}
	l, err := sluice.New(sluice.Config{Origin: calls, OriginTimeout: timeout, OriginBackoff: backoff,
		RefreshAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The whole test runs within one window: a new window is a new counter,
	// which would be read from the origin.
	testenv.AwayFromRollover(t, time.Minute, 10*time.Second)
	r := sluice.Request{Workspace: uniqueWorkspace(t), Namespace: "hang", Identifier: "user",
		Limit: lowLimit, Duration: time.Minute, Cost: 1}
	// One unit, then a request for the whole limit: denied locally, it puts
	// the counter in strict mode.
	if res, err := l.Ratelimit(ctx, r); err != nil || !res.Success {
		t.Fatalf("first unit: %+v, %v", res, err)
	}
	whole := r
	whole.Cost = lowLimit
	if res, err := l.Ratelimit(ctx, whole); err != nil || res.Success {
		t.Fatalf("a request over the limit: %+v, %v; want a denial (strict mode)", res, err)
	}
	// The limit is not part of the counter's identity: with a higher limit
	// the local view admits, and the counter is in strict mode for a minute.
	r.Limit = 1 << 40

	removeLatency := proxy.Latency(10 * time.Second)
	decidesBefore, loadsBefore := calls.snapshot()
	latencies, failures, span := sendWaves(l, r, waves, perWave, backoff/2)
	removeLatency()
	if err := l.Close(); err != nil {
		t.Errorf("Close after the latency was removed: %v", err)
	}

	decides, loads := calls.snapshot()
	decides, loads = decides[len(decidesBefore):], loads[len(loadsBefore):]
	slices.Sort(latencies)
	t.Logf("%d requests over %v: %d origin decisions, %d reads; latency p50 %v, p99 %v, max %v",
		len(latencies), span.Round(time.Millisecond), len(decides), len(loads),
		latencies[len(latencies)/2], latencies[len(latencies)*99/100], latencies[len(latencies)-1])
	if len(failures) > 0 {
		t.Errorf("%d requests failed or were denied (first: %v); the local view admits them all", len(failures), failures[0])
	}
	if len(decides) == 0 {
		t.Fatal("no strict-mode decision reached the origin: the counter was not in strict mode")
	}
	checkBackedOff(t, decides, span, timeout, backoff)
	if len(loads) > 0 {
		t.Errorf("%d origin reads besides the decisions; the counter is warm", len(loads))
	}
	if worst := latencies[len(latencies)-1]; worst > timeout+slack {
		t.Errorf("a request waited %v; the origin timeout is %v", worst, timeout)
	}
}

// sendWaves sends waves of perWave concurrent requests r to l, a wave
// every gap, and returns each request's latency, the errors and denials,
// and how long the waves took.
func sendWaves(l *sluice.Limiter, r sluice.Request, waves, perWave int, gap time.Duration) (latencies []time.Duration, failures []error, span time.Duration) {
	var mu sync.Mutex
	start := time.Now()
	var all sync.WaitGroup
	for w := range waves {
		time.Sleep(time.Until(start.Add(time.Duration(w) * gap)))
		for range perWave {
			all.Go(func() {
				began := time.Now()
				res, err := l.Ratelimit(context.Background(), r)
				took := time.Since(began)
				mu.Lock()
				defer mu.Unlock()
				latencies = append(latencies, took)
				if err != nil || !res.Success {
					failures = append(failures, err)
				}
			})
		}
	}
	all.Wait()
	return latencies, failures, time.Since(start)
}

// checkBackedOff checks that every origin decision in decides failed (the
// origin hangs for longer than timeout) and that they were at least one
// back-off apart, so at most one per back-off period over span.
func checkBackedOff(t *testing.T, decides []loggedCall, span, timeout, backoff time.Duration) {
	t.Helper()
	for i, c := range decides {
		if c.err == nil {
			t.Errorf("decision %d succeeded through a 10s latency with a %v timeout", i, timeout)
		}
		if i > 0 && c.at-decides[i-1].at < backoff.Milliseconds() {
			t.Errorf("decisions %d and %d at %d and %d ms: %d ms apart, within one back-off (%v)",
				i-1, i, decides[i-1].at, c.at, c.at-decides[i-1].at, backoff)
		}
	}
	if most := int(span/backoff) + 1; len(decides) > most {
		t.Errorf("%d origin decisions in %v; at most one per back-off period (%d)", len(decides), span, most)
	}
}
