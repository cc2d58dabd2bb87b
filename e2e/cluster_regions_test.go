package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestClusterRegionsLeadOnce runs two regions of three `--origin cluster`
// nodes each on one MariaDB database of their own: in each region one node
// reports itself the leader (sluice_global_leader), the one that talks to
// MySQL, and a counter spent to its limit on the nodes of one region is
// denied in the other, carried by the two leaders and imported at the
// counter's owner.
func TestClusterRegionsLeadOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("six processes in two clusters")
	}
	t.Parallel() // with the other cluster tests (make test: three at a time): their time is mostly waiting
	const (
		limit    = 100
		d        = 10 * time.Minute
		interval = 500 * time.Millisecond
	)
	dsn := freshDatabase(t)
	ws := fmt.Sprintf("e2e-cluster-regions-%d", time.Now().UnixNano())
	regions := map[string][]*clusterNode{}
	for _, region := range []string{"eu", "us"} {
		regions[region] = startCluster(t, 3, ws, "--mysql-dsn", dsn, "--store", "sqlite", "--region", region,
			"--global-interval", interval.String())
	}
	leaders := func(nodes []*clusterNode) int {
		n := 0
		for _, nd := range nodes {
			if strings.Contains(nd.metrics(), "\nsluice_global_leader 1\n") {
				n++
			}
		}
		return n
	}
	for region, nodes := range regions {
		deadline := time.Now().Add(10 * interval)
		for leaders(nodes) != 1 && time.Now().Before(deadline) {
			time.Sleep(interval / 5)
		}
		if got := leaders(nodes); got != 1 {
			t.Fatalf("region %s: %d nodes report themselves leader, want 1", region, got)
		}
	}
	id := fmt.Sprintf("spent-%d", time.Now().UnixNano())
	for i := range limit { // the whole limit in eu, over its three nodes
		if r := regions["eu"][i%3].limit(rk, "regions", id, limit, d.Milliseconds(), 1); !r.Success {
			t.Fatalf("request %d in eu denied: %+v", i, r)
		}
	}
	// A region may hold back part of a count far from its limit (the
	// publication rule), not one at its limit: us must come to deny the
	// counter. Its first look makes the counter warm there; it reads it
	// again every RefreshAfter (5 s) at the latest.
	spent := time.Now()
	for {
		r := regions["us"][0].limit(rk, "regions", id, limit, d.Milliseconds(), 1)
		if !r.Success {
			t.Logf("us denies the counter eu spent (remaining %d) %v after eu's last request", r.Remaining, time.Since(spent).Round(time.Millisecond))
			break
		}
		if time.Since(spent) > 3*5*time.Second {
			t.Fatalf("us still admits (remaining %d of %d) 15 s after eu spent the limit", r.Remaining, limit)
		}
		time.Sleep(interval / 5)
	}
	for region, nodes := range regions {
		if got := leaders(nodes); got != 1 {
			t.Errorf("region %s at the end: %d leaders, want 1", region, got)
		}
	}
}
