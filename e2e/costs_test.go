package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/sim"
)

// TestSimulatedCostsMatchRealProcesses runs two regions of two `sluice
// serve` processes (each region on its own Redis database, both on one
// MariaDB global layer, a round every second) under a load at the limits
// (spreadLoadAt: 200 identifiers each sent its limit of 50 per 10 s, every
// request to a node picked at random) for two windows, then replays the
// same requests (each at the instant it was answered, to the node that
// answered it) through `sluice sim`'s deployment of the same shape
// (sim.RunTrace), and compares what Redis (INFO commandstats) and MariaDB
// (its status counters) counted with what the simulation reports: Redis
// commands per request, Redis keys written per request (the PEXPIRE each
// new cell key gets, once), MySQL statements, rows written and rows read
// per second, each within 20%. The rows written are MariaDB's
// Handler_write, every row an INSERT sent (a row already there is then
// updated): the simulation's rows (counts and denials) plus its
// announcements, a row each; the rows read its Handler_read_*, which the
// simulation counts as the store's pulls read them (sim/mysqlreads.go). The load is at the limits because the
// counters that near them are the ones that write rows: at half the limits
// each of two regions admits a quarter of a limit a window, less than the
// third it holds back unpublished, and the rows are the regions'
// announcements alone.
//
// Under a load far above the limits the simulation overstates origin
// decisions (about 2× at 10×): its requests come one at a time, so it
// never batches the concurrent strict-mode requests of a counter into one
// decision as a real node does.
func TestSimulatedCostsMatchRealProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s of load on four processes")
	}
	const (
		ids    = 200
		limit  = 50
		load   = 1.0
		d      = 10 * time.Second
		run    = 2 * d
		margin = 0.2
	)
	addr, dsn := testenv.RedisAddr(t), freshDatabase(t) // the simulation starts on empty tables too
	ws := fmt.Sprintf("e2e-costs-%d", time.Now().UnixNano())
	var nodes []*node
	for i, region := range []string{"eu", "us"} {
		url := fmt.Sprintf("redis://%s/%d", addr, 7+i)
		for range 2 {
			nodes = append(nodes, start(t, nil, "--redis-url", url, "--mysql-dsn", dsn, "--store", "sqlite",
				"--region", region, "--global-interval", "1s", "--root-key", rk+":"+ws))
		}
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rdb.Close()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	begin := time.Now().Truncate(d).Add(d) // the load starts on a window boundary, as the simulation does
	time.Sleep(time.Until(begin) - 300*time.Millisecond)
	redisBefore, mysqlBefore := testenv.CommandCalls(t, rdb), mysqlCounters(t, db)
	sent := spreadLoadAt(load, func(time.Time) []*node { return nodes }, "costs", 11, ids, limit, d, begin, run)
	time.Sleep(time.Until(begin.Add(run)) + 200*time.Millisecond) // the last replays land
	redisAfter, mysqlAfter := testenv.CommandCalls(t, rdb), mysqlCounters(t, db)
	if len(sent.failures) > 0 {
		t.Fatalf("%d requests failed, e.g. %s", len(sent.failures), sent.failures[0])
	}

	res, err := sim.RunTrace(traceOf(sent.results, nodes, "costs", 2), sim.TraceDeployment{
		Name: "costs", Regions: 2, Nodes: 2, Limit: limit, Window: d, GlobalInterval: time.Second,
	}, 11)
	if err != nil {
		t.Fatal(err)
	}
	seconds := run.Seconds()
	// The simulation's figures per second are over its windows: one more
	// than the run's when a request sent in the run's last instants was
	// answered after it. Over the run's seconds, as the real figures:
	simulatedSeconds := float64(res.Windows) * d.Seconds()
	perRunSecond := func(perSecond float64) float64 { return perSecond * simulatedSeconds / seconds }
	real := map[string]float64{
		"Redis commands per request":     (originCommands(redisAfter) - originCommands(redisBefore)) / float64(len(sent.results)),
		"Redis keys written per request": float64(redisAfter["pexpire"]-redisBefore["pexpire"]) / float64(len(sent.results)),
		"MySQL statements per second":    (mysqlAfter.statements - mysqlBefore.statements) / seconds,
		"MySQL rows written per second":  (mysqlAfter.written - mysqlBefore.written) / seconds,
		"MySQL rows read per second":     (mysqlAfter.read - mysqlBefore.read) / seconds,
	}
	simulated := map[string]float64{
		"Redis commands per request":     res.RedisCallsPerRequest,
		"Redis keys written per request": res.RedisKeysWrittenPerRequest,
		"MySQL statements per second":    perRunSecond(res.MySQLStatementsPerSecond),
		"MySQL rows written per second":  perRunSecond(res.MySQLRowsPerSecond) + float64(res.Global.Announcements)/seconds,
		"MySQL rows read per second":     perRunSecond(res.MySQLRowsReadPerSecond),
	}
	t.Logf("%d requests (load average %s)", len(sent.results), loadavg())
	for name, r := range real {
		s := simulated[name]
		t.Logf("%s: %.3f real, %.3f simulated", name, r, s)
		if math.Abs(r-s) > margin*max(r, s) {
			t.Errorf("%s: %.3f from the real processes, %.3f simulated: more than %.0f%% apart", name, r, s, 100*margin)
		}
	}
}

// redisCommands returns the calls of the commands the Redis origin runs,
// those its scripts run included, from INFO commandstats.
func redisCommands(t *testing.T, rdb *goredis.Client) float64 {
	t.Helper()
	return originCommands(testenv.CommandCalls(t, rdb))
}

// originCommands returns the calls of the commands the Redis origin runs
// among calls, the calls of each command (see testenv.CommandCalls). The
// scripts of the origin set a new cell key's expiry (PEXPIRE) once, when
// they create it: the PEXPIRE calls are the keys the origin wrote.
func originCommands(calls map[string]int64) float64 {
	var n float64
	for name, c := range calls {
		switch name {
		case "evalsha", "eval", "hget", "hmget", "hincrby", "hset", "pexpire":
			n += float64(c)
		}
	}
	return n
}

// traceOf returns the requests sent as a trace of namespace ns: each at
// the instant it was answered, to the node that answered it, nodes being
// perRegion nodes of each region in turn.
func traceOf(sent []sent, nodes []*node, ns string, perRegion int) sim.Trace {
	tr := sim.Trace{File: ns}
	for _, r := range sent {
		i := slices.Index(nodes, r.node)
		tr.Requests = append(tr.Requests, sim.TraceRequest{Time: r.at, Namespace: ns,
			Identifier: "user-" + strconv.Itoa(r.id), Cost: 1, Region: i / perRegion, Node: i % perRegion})
	}
	return tr
}

// mysqlTally is what MariaDB's status counters say it ran, wrote and read.
type mysqlTally struct{ statements, written, read float64 }

// mysqlCounters reads the statements (INSERT, SELECT, UPDATE, DELETE, DO) the
// server ran, the rows INSERTs sent to its storage engines (Handler_write,
// internal temporary tables apart) and the rows they read (the
// Handler_read_ counters: by key, next in an index, at random, in a scan),
// server-wide.
func mysqlCounters(t *testing.T, db *sql.DB) mysqlTally {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "SHOW GLOBAL STATUS WHERE Variable_name IN "+
		"('Com_insert', 'Com_select', 'Com_update', 'Com_delete', 'Com_do', 'Handler_write', "+
		"'Handler_read_first', 'Handler_read_key', 'Handler_read_last', 'Handler_read_next', 'Handler_read_prev', 'Handler_read_rnd', 'Handler_read_rnd_next')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out mysqlTally
	for rows.Next() {
		var name string
		var v float64
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasPrefix(name, "Com_"):
			out.statements += v
		case strings.HasPrefix(name, "Handler_read_"):
			out.read += v
		default:
			out.written += v
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
