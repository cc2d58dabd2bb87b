package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestTwoRegionsShareOneLimit runs two `sluice serve` processes as two
// regions (each its own memory origin) on the real MariaDB. Counts spent in
// one region are imported by the other within a few global intervals, and a
// burst that exhausts the limit in one region is denied in the other. The
// workspace is unique to this run.
func TestTwoRegionsShareOneLimit(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	ws := fmt.Sprintf("e2e-global-%d", time.Now().UnixNano())
	common := []string{"--mysql-dsn", dsn, "--root-key", rk + ":" + ws, "--global-interval", "100ms"}
	eu := start(t, nil, append(common, "--region", "eu")...)
	us := start(t, nil, append(common, "--region", "us")...)
	if !strings.Contains(eu.logs(), "global layer on") {
		t.Fatalf("node eu does not report the global layer:\n%s", eu.logs())
	}

	// Counters: 6 of 10 spent in eu are seen in us.
	for i := range 6 {
		if d := eu.limit(rk, "shared", "counted", 10, window, 1); !d.Success {
			t.Fatalf("eu request %d denied: %+v", i, d)
		}
	}
	waitFor(t, 5*time.Second, "us to import eu's 6 units", func() bool {
		return us.limit(rk, "shared", "counted", 10, window, 0).Remaining == 4
	})
	for i := range 4 {
		if d := us.limit(rk, "shared", "counted", 10, window, 1); !d.Success {
			t.Fatalf("us request %d of the 4 left denied: %+v", i, d)
		}
	}
	if d := us.limit(rk, "shared", "counted", 10, window, 1); d.Success {
		t.Fatalf("us admitted an 11th unit across both regions: %+v", d)
	}

	// A burst in us only: eu denies it soon after.
	for i := range 20 {
		d := us.limit(rk, "shared", "burst", 20, window, 1)
		if !d.Success {
			t.Fatalf("us burst request %d denied: %+v", i, d)
		}
	}
	if d := us.limit(rk, "shared", "burst", 20, window, 1); d.Success {
		t.Fatal("us admitted past its limit")
	}
	waitFor(t, 5*time.Second, "eu to deny the burst spent in us", func() bool {
		return !eu.limit(rk, "shared", "burst", 20, window, 0).Success ||
			eu.limit(rk, "shared", "burst", 20, window, 0).Remaining == 0
	})
	if d := eu.limit(rk, "shared", "burst", 20, window, 1); d.Success {
		t.Fatalf("eu admitted a request of a counter exhausted in us: %+v", d)
	}
}

// waitFor polls cond every 50ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}
