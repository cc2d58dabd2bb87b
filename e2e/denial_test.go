package e2e

import (
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestDenialNeverWaitsOnASlowOrigin puts 300 ms of latency between a
// `sluice serve` and its Redis once 50 counters have used up their limit:
// every request to them is denied without waiting on Redis (p99 ≤ 5 ms),
// and so is a request on a new counter whose cost is above its limit.
func TestDenialNeverWaitsOnASlowOrigin(t *testing.T) {
	server := testenv.StartRedis(t)
	proxy := testenv.NewProxy(t, server.Addr)
	n := start(t, nil, "--redis-url", "redis://"+proxy.Addr())
	hc := &http.Client{Timeout: 5 * time.Second}
	const ids, limit = 50, 5
	for id := range ids {
		for i := range limit + 1 {
			ok, err := limitOverHTTP(hc, n.URL, "slow", "user-"+strconv.Itoa(id), limit, time.Minute)
			if err != nil || ok != (i < limit) {
				t.Fatalf("user-%d, request %d: success %v, %v", id, i+1, ok, err)
			}
		}
	}
	defer proxy.Latency(300 * time.Millisecond)()
	var took []time.Duration
	for round := range 10 {
		for id := range ids {
			start := time.Now()
			ok, err := limitOverHTTP(hc, n.URL, "slow", "user-"+strconv.Itoa(id), limit, time.Minute)
			took = append(took, time.Since(start))
			if err != nil || ok {
				t.Fatalf("round %d, user-%d: success %v, %v; want a denial", round, id, ok, err)
			}
		}
	}
	for id := range ids { // cold counters, cost above the limit
		start := time.Now()
		var d limitData
		n.call("rk", "limit", map[string]any{"namespace": "slow", "identifier": "new-" + strconv.Itoa(id), "limit": 5, "duration": 60_000, "cost": 6}).data(t, &d)
		took = append(took, time.Since(start))
		if d.Success {
			t.Fatalf("new-%d: cost 6 of a limit of 5 admitted", id)
		}
	}
	slices.Sort(took)
	p99, worst := took[len(took)*99/100-1], took[len(took)-1]
	t.Logf("%d denials with Redis 300 ms away: p50 %v, p99 %v, max %v", len(took), took[len(took)/2], p99, worst)
	if p99 > 5*time.Millisecond {
		t.Fatalf("p99 of denials %v with Redis 300 ms away, want ≤ 5ms: a denial waited on the origin", p99)
	}
}
