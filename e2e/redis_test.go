package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestRedisOriginSharedAndFlushedOnShutdown runs nodes on the real Redis.
// Node a accepts 5 units and is stopped at once: its graceful shutdown must
// flush the pending replay, so node b, started afterwards and cold, hydrates
// the counter from Redis and sees the 5 units. The workspace is unique to
// this run.
func TestRedisOriginSharedAndFlushedOnShutdown(t *testing.T) {
	url := "redis://" + testenv.RedisAddr(t) + "/0"
	ws := fmt.Sprintf("e2e-redis-%d", time.Now().UnixNano())
	args := []string{"--redis-url", url, "--root-key", rk + ":" + ws}
	a := start(t, nil, args...)
	for i := range 5 {
		if d := a.limit(rk, "shared", "u", 10, window, 1); !d.Success || d.Remaining != int64(9-i) {
			t.Fatalf("node a request %d: %+v", i, d)
		}
	}
	if err := a.stop(15 * time.Second); err != nil {
		t.Fatalf("stopping node a: %v\n%s", err, a.logs())
	}
	b := start(t, nil, args...)
	if d := b.limit(rk, "shared", "u", 10, window, 0); d.Remaining != 5 {
		t.Fatalf("node b sees remaining %d, want 5 (node a's increments were not flushed to Redis)\n%s", d.Remaining, a.logs())
	}
}
