package e2e

import (
	"database/sql"
	"fmt"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/global/mysql"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/redis"
	"github.com/sluicehq/sluice/sim"
)

// globalWork is what the global layer cost MariaDB over a run.
type globalWork struct {
	statements, rowsRead float64 // per second
	requests             int
}

// TestGlobalWorkGrowsWithRegions runs two regions of `sluice serve` on one
// MariaDB (each region on its own Redis database, a round every third of a
// second), first with one node per region, then with three, under the same
// load at the limits (spreadLoadAt: 200 identifiers, 50 per 12 s each, every
// request to a node of either region at random) for two windows, 24 s: two
// of a leader's cleanups (one every 12 intervals), which read the rows they
// delete; over 20 s one run could hold one and the other two, 10% of the
// rows read now that rows carry many cells. One node of each
// region, its leader, talks to MariaDB, so the statements and rows read a
// second (MariaDB's Com_* and Handler_read_* counters) are the same, within
// 10%, with one node per region and with three; both match the simulation
// of the same requests (sim.RunTrace) within 20% (the simulation counts the
// batch rows the store's reads read over their overlap: sim/mysqlreads.go).
// Halfway through the
// three-node run the leader of the first region is killed (SIGKILL): another
// node of the region reports itself leader within two intervals, every
// request sent to the live nodes is answered, and no region's stored count
// of a cell passes what the region's Redis holds (nothing written twice).
func TestGlobalWorkGrowsWithRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("two runs of 24 s on real processes")
	}
	var one, three globalWork
	t.Run("one node per region", func(t *testing.T) { one = globalRun(t, 1, false) }) // its processes stop with it
	t.Run("three nodes per region", func(t *testing.T) { three = globalRun(t, 3, true) })
	for _, c := range []struct {
		name      string
		one, more float64
	}{
		{"MySQL statements per second", one.statements, three.statements},
		{"MySQL rows read per second", one.rowsRead, three.rowsRead},
	} {
		t.Logf("%s: %.1f with one node per region, %.1f with three", c.name, c.one, c.more)
		if math.Abs(c.one-c.more) > 0.10*max(c.one, c.more) {
			t.Errorf("%s: %.1f with one node per region, %.1f with three: more than 10%% apart", c.name, c.one, c.more)
		}
	}
}

// globalRun runs the load on two regions of perRegion nodes each, killing
// the first region's leader halfway if kill is set, and returns what
// MariaDB counted, after comparing it with the simulation.
func globalRun(t *testing.T, perRegion int, kill bool) globalWork {
	t.Helper()
	const (
		ids      = 200
		limit    = 50
		d        = 12 * time.Second // a leader's cleanup period (12 intervals)
		run      = 2 * d
		interval = time.Second
	)
	// Each run has a database of its own: rows other tests left in shared
	// tables would be read, cleaned and compacted by whichever run came
	// first, and the two runs would not do the same work.
	addr, dsn := testenv.RedisAddr(t), freshDatabase(t)
	ws := fmt.Sprintf("e2e-leader-%d-%d", perRegion, time.Now().UnixNano())
	var nodes []*node
	for i, region := range []string{"eu", "us"} {
		url := fmt.Sprintf("redis://%s/%d", addr, 12+i)
		for range perRegion {
			nodes = append(nodes, start(t, nil, "--redis-url", url, "--mysql-dsn", dsn, "--store", "sqlite",
				"--region", fmt.Sprintf("%s-%d", region, perRegion), "--global-interval", interval.String(),
				"--root-key", rk+":"+ws))
		}
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	begin := time.Now().Truncate(d).Add(d)
	time.Sleep(time.Until(begin) - 300*time.Millisecond)
	leader := leaderOf(t, nodes[:perRegion])
	// Leaders clean up in their first round after each multiple of 12
	// intervals on the clock, here begin, begin+d and begin+run: the kill
	// falls between two, and the counters are read just before the last,
	// so every run holds the same cleanups (the first finds nothing to
	// delete, the second a window's rows).
	killAt := begin.Add(run/2 + d/4)
	live := func(due time.Time) []*node {
		if !kill || due.Before(killAt.Add(-time.Second)) { // a request in flight at the kill would fail
			return nodes
		}
		var out []*node
		for _, n := range nodes {
			if n != leader {
				out = append(out, n)
			}
		}
		return out
	}
	if kill {
		go func() {
			time.Sleep(time.Until(killAt))
			_ = leader.cmd.Process.Signal(syscall.SIGKILL)
		}()
	}
	before := mysqlCounters(t, db)
	sent := spreadLoadAt(1, live, "leader", 13, ids, limit, d, begin, run)
	time.Sleep(time.Until(begin.Add(run)) - interval/10)
	after := mysqlCounters(t, db)
	if len(sent.failures) > 0 {
		t.Fatalf("%d requests failed, e.g. %s", len(sent.failures), sent.failures[0])
	}
	if kill {
		checkTakeover(t, nodes[:perRegion], leader, killAt, 2*interval)
	}
	for i, region := range []string{"eu", "us"} {
		checkNothingTwice(t, dsn, ws, fmt.Sprintf("%s-%d", region, perRegion), fmt.Sprintf("redis://%s/%d", addr, 12+i))
	}
	checkLeaderMemory(t, nodes[perRegion:])
	w := globalWork{statements: (after.statements - before.statements) / run.Seconds(),
		rowsRead: (after.read - before.read) / run.Seconds(), requests: len(sent.results)}
	compareWithSimulation(t, w, sent, nodes, perRegion, limit, d, run, interval)
	return w
}

// checkNothingTwice checks that no count region wrote for workspace ws
// passes the cell's total in the region's Redis: a count written twice
// (after a failover, say) would. It reads the entries as a pull of the
// MySQL store does, a page at a time.
func checkNothingTwice(t *testing.T, dsn, ws, region, redisURL string) {
	t.Helper()
	opts, err := goredis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opts)
	defer rdb.Close()
	store, err := mysql.Open(t.Context(), dsn, mysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	counts := map[origin.Cell]int64{}
	var cursor global.Cursor
	for range 1000 {
		p, err := store.Pull(t.Context(), "checker", cursor, time.Now().UnixMilli(), 60_000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Entries {
			if e.Region == region && e.Cell.Workspace == ws {
				counts[e.Cell] = max(counts[e.Cell], e.Count)
			}
		}
		if len(p.Entries) == 0 || p.Next == cursor {
			break
		}
		cursor = p.Next
	}
	for c, n := range counts {
		total, err := rdb.HGet(t.Context(), redis.CellKey(c), "n").Int64()
		if err != nil || n > total {
			t.Errorf("region %s, %s window %d: %d stored, %d (%v) in its Redis", region, c.Identifier, c.Sequence, n, total, err)
		}
	}
	t.Logf("region %s: %d cells' counts, none above its Redis total", region, len(counts))
}

// leaderOf returns the node of region that reports itself its leader.
func leaderOf(t *testing.T, region []*node) *node {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range region {
			if strings.Contains(n.metrics(), "\nsluice_global_leader 1\n") {
				return n
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no node of the region reports itself leader")
	return nil
}

// checkLeaderMemory checks that the leader of region reports keeping
// memory for the cells it handled (sluice_global_leader_memory_bytes), and
// that the other nodes report none.
func checkLeaderMemory(t *testing.T, region []*node) {
	t.Helper()
	for _, n := range region {
		m := n.metrics()
		bytes := sampleSum(m, "sluice_global_leader_memory_bytes")
		leads := strings.Contains(m, "\nsluice_global_leader 1\n")
		t.Logf("leader %v: %.0f bytes kept as leader", leads, bytes)
		if leads != (bytes > 0) {
			t.Errorf("a node that leads (%v) reports %.0f bytes kept as leader", leads, bytes)
		}
	}
}

// checkTakeover checks that a node of region other than the killed one
// took the lease within within of the kill, by the lease's start.
func checkTakeover(t *testing.T, region []*node, killed *node, at time.Time, within time.Duration) {
	t.Helper()
	for _, n := range region {
		if n == killed {
			continue
		}
		m := n.metrics()
		if !strings.Contains(m, "\nsluice_global_leader 1\n") {
			continue
		}
		since := sampleSum(m, "sluice_global_leader_since_seconds")
		took := time.UnixMilli(int64(since * 1000)).Sub(at)
		t.Logf("a node took the lease %v after the leader was killed", took.Round(time.Millisecond))
		if took > within {
			t.Errorf("the lease changed hands %v after the kill, want within %v", took, within)
		}
		return
	}
	t.Error("no live node of the region leads it after the kill")
}

// compareWithSimulation replays the requests answered through sluice sim's
// deployment of the same shape and compares its MySQL statements and rows
// read a second with what MariaDB counted, within 20%.
func compareWithSimulation(t *testing.T, w globalWork, sent loadResult, nodes []*node, perRegion int, limit int, d, run, interval time.Duration) {
	t.Helper()
	res, err := sim.RunTrace(traceOf(sent.results, nodes, "leader", perRegion), sim.TraceDeployment{
		Name: "leader", Regions: 2, Nodes: perRegion, Limit: int64(limit), Window: d, GlobalInterval: interval,
	}, 13)
	if err != nil {
		t.Fatal(err)
	}
	scale := float64(res.Windows) * d.Seconds() / run.Seconds()
	for _, c := range []struct {
		name           string
		real, simulate float64
		bound          bool
	}{
		{"MySQL statements per second", w.statements, res.MySQLStatementsPerSecond * scale, true},
		{"MySQL rows read per second", w.rowsRead, res.MySQLRowsReadPerSecond * scale, true},
	} {
		t.Logf("%d nodes per region, %s: %.1f real, %.1f simulated", perRegion, c.name, c.real, c.simulate)
		if c.bound && math.Abs(c.real-c.simulate) > 0.20*max(c.real, c.simulate) {
			t.Errorf("%d nodes per region, %s: %.1f real, %.1f simulated: more than 20%% apart", perRegion, c.name, c.real, c.simulate)
		}
	}
}
