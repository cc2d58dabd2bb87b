package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/global/mysql"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
)

// The deployment of scale-1m at full size, as one of its nodes sees it: a
// million identities picked by a Zipf law of exponent 1.1 (as the
// simulator picks them), 10 regions of 20 nodes, a million requests a
// second in all, 60 a minute allowed to each identity.
const (
	fullIdentities = 1_000_000
	fullRegions    = 10
	fullNodes      = 20
	fullRate       = 1_000_000 // requests per second, in all
	fullLimit      = 60
	fullWindow     = time.Minute
	fullSkew       = 1.1
)

// TestFullSizeNode runs one `sluice serve` of scale-1m at full size (see the
// constants above), on its own Redis database and on MariaDB, for two windows.
// The 9 other regions' rows are in the global layer's table as they would be at
// full size (fullSizeRows) for the window before and the two windows of the
// run; the node starts next to them and catches up before the run. During it
// another writer changes them as those regions would (SLUICE_FULLSIZE_ROWS rows
// a second, default 2,000: a fraction of what they would write), and the node
// serves its share of the requests (a million a second over 200 nodes: 5,000 a
// second, SLUICE_FULLSIZE_RATE) over HTTP. It reports how long the catch-up
// took and, every 10 s and at the end, the node's heap, the cells it holds, its
// global rounds and the cells they pulled, and what MariaDB read and Redis ran,
// then the heap live after a collection, and fails if that passes the 250 MB of
// docs/capacity.md's target or the node did not pull every cell of
// the table.
//
// It takes about five minutes and fills ~2.6 million rows, so it runs
// only with SLUICE_FULLSIZE=1 (make fullsize).
func TestFullSizeNode(t *testing.T) {
	if os.Getenv("SLUICE_FULLSIZE") == "" {
		t.Skip("SLUICE_FULLSIZE=1 runs it (make fullsize): ~5 minutes, ~2.6 million rows in MariaDB")
	}
	rate, rowsPerSecond := envInt(t, "SLUICE_FULLSIZE_RATE", fullRate/(fullRegions*fullNodes)), envInt(t, "SLUICE_FULLSIZE_ROWS", 2000)
	addr, dsn := testenv.RedisAddr(t), testenv.MySQLDSN(t)
	ctx := context.Background()
	ws := fmt.Sprintf("e2e-full-%d", time.Now().UnixNano())
	store, err := mysql.Open(ctx, dsn, mysql.Config{ChunkRows: mysql.MaxChunkRows, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	testBegan := time.Now()
	t.Cleanup(func() { deleteRegionRows(t, db, testBegan) }) // runs first
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, DB: 12})
	defer rdb.Close()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// The table holds the rows of the window before the run's and of the
	// run's two windows. The node starts once they are filled (~1 minute
	// on a 2-core VM) and catches up before the load starts.
	w := fullWindow.Milliseconds()
	seq := time.Now().UnixMilli()/w + 3
	rows := fullSizeRows()
	began := time.Now()
	filled := fill(t, store, ws, rows, seq-1, seq, seq+1)
	t.Logf("filled %d rows (%d identities × %d other regions × 3 windows) in %v", filled, len(rows), fullRegions-1, time.Since(began).Round(time.Millisecond))
	if time.Now().UnixMilli()/w >= seq {
		t.Skip("filling took longer than the time left before the run's windows")
	}
	nd := start(t, nil, "--redis-url", fmt.Sprintf("redis://%s/12", addr), "--mysql-dsn", dsn,
		"--region", "r0", "--global-interval", "1s", "--root-key", rk+":"+ws)
	mysqlBefore, started := mysqlCounters(t, db), time.Now()
	pulled := 0.0
	for time.Now().Before(time.UnixMilli(seq*w)) && pulled < float64(3*len(rows)) {
		time.Sleep(min(time.Until(time.UnixMilli(seq*w)), 5*time.Second))
		pulled = reportNode(t, nd, time.Since(started)).pulled
	}
	caughtUp := mysqlCounters(t, db)
	t.Logf("%.0f of the %d cells pulled in %v (before the run's first window): MariaDB read %.0f rows, %.0f statements",
		pulled, 3*len(rows), time.Since(started).Round(100*time.Millisecond), caughtUp.read-mysqlBefore.read, caughtUp.statements-mysqlBefore.statements)
	time.Sleep(time.Until(time.UnixMilli(seq*w + 500)))

	end := time.UnixMilli((seq+2)*w - 1000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { changeRows(t, store, ws, rows, rowsPerSecond, stop) })
	mysqlBefore, redisBefore := mysqlCounters(t, db), redisCommands(t, rdb)
	last, peak := mysqlBefore, 0.0
	sent := fullSizeLoad(t, nd.URL, rate, end, func(elapsed time.Duration) {
		peak = max(peak, reportNode(t, nd, elapsed).heap)
		now := mysqlCounters(t, db)
		t.Logf("        MariaDB over those 10 s: %.0f rows read, %.0f written, %.0f statements", now.read-last.read, now.written-last.written, now.statements-last.statements)
		last = now
	})
	close(stop)
	wg.Wait()
	mysqlAfter, redisAfter := mysqlCounters(t, db), redisCommands(t, rdb)
	m := reportNode(t, nd, sent.took)
	t.Logf("%d requests (%d failed, %.0f/s), load average %s; Redis %.3f commands per request; MariaDB %.0f rows read, %.0f written, %.0f statements",
		sent.n.Load(), sent.failed.Load(), float64(sent.n.Load())/sent.took.Seconds(), loadavg(),
		(redisAfter-redisBefore)/float64(max(sent.n.Load(), 1)), mysqlAfter.read-mysqlBefore.read,
		mysqlAfter.written-mysqlBefore.written, mysqlAfter.statements-mysqlBefore.statements)
	if cells := 3 * len(rows); m.pulled < float64(cells) {
		t.Errorf("the node pulled %.0f cells in %.0f rounds; want at least the %d filled", m.pulled, m.rounds, cells)
	}
	live := liveHeap(t, nd)
	t.Logf("heap: %.1f MB live after a collection at the end, %.1f MB in use at most (garbage included) over the run", live/1e6, max(peak, m.heap)/1e6)
	if live > 250e6 {
		t.Errorf("live heap %.1f MB, above the 250 MB target", live/1e6)
	}
}

// liveHeap returns the node's heap after a collection: HeapAlloc of the
// heap profile that its admin listener serves with gc=1.
func liveHeap(t *testing.T, nd *node) float64 {
	code, body := nd.admin("/debug/pprof/heap?gc=1&debug=1")
	if code != http.StatusOK {
		t.Fatalf("heap profile: %d", code)
	}
	m := regexp.MustCompile(`(?m)^# HeapAlloc = (\d+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("the heap profile has no HeapAlloc")
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// fullSizeRows returns, for each identity a region of scale-1m publishes
// in a window, by rank, its count in each region: the region's requests
// for it in a minute (traffic is even over the regions) up to its part of
// the limit, for every identity whose count reaches limit / 2R: the first
// row's threshold until 2026-11-26, when the publication rule began to
// count each region's pace and to write a counter's first row between
// limit / 2.5R and limit / 1.5R, later for most; so the table holds at least
// the rows that rule leaves.
func fullSizeRows() []int64 {
	var h float64
	for k := range fullIdentities {
		h += math.Pow(float64(k+1), -fullSkew)
	}
	perRegion := float64(fullRate) / fullRegions * fullWindow.Seconds()
	var counts []int64
	for k := range fullIdentities {
		n := int64(math.Round(perRegion * math.Pow(float64(k+1), -fullSkew) / h))
		if n < fullLimit/(2*fullRegions) {
			break
		}
		counts = append(counts, min(n, fullLimit/fullRegions))
	}
	return counts
}

// fullKey is the key of the identity of rank k in workspace ws.
func fullKey(ws string, k int) origin.Key {
	return origin.Key{Workspace: ws, Namespace: "full", Identifier: "id-" + strconv.Itoa(k), Duration: fullWindow}
}

// fill writes counts for the 9 other regions in windows seqs through the
// global layer's own store, and returns the rows written.
func fill(t *testing.T, s *mysql.Store, ws string, counts []int64, seqs ...int64) int {
	t.Helper()
	ctx := context.Background()
	w := fullWindow.Milliseconds()
	var n atomic.Int64
	var wg sync.WaitGroup
	for r := 1; r < fullRegions; r++ {
		region := "r" + strconv.Itoa(r)
		wg.Go(func() {
			for _, q := range seqs {
				for from := 0; from < len(counts); from += 10_000 {
					batch := make([]global.Count, 0, 10_000)
					for k := from; k < min(from+10_000, len(counts)); k++ {
						batch = append(batch, global.Count{Cell: origin.Cell{Key: fullKey(ws, k), Sequence: q}, Count: counts[k], ExpiresAt: (q + 2) * w})
					}
					if err := s.Publish(ctx, region, batch, time.Now().UnixMilli()); err != nil {
						t.Error(err)
						return
					}
					n.Add(int64(len(batch)))
				}
			}
		})
	}
	wg.Wait()
	for r := 1; r < fullRegions; r++ {
		if err := s.Announce(ctx, "r"+strconv.Itoa(r), time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return int(n.Load())
}

// changeRows raises perSecond counts of the current window a second, each
// of an identity picked by the Zipf law among those counts and of one of
// the 9 other regions, and announces those regions every second, until
// stop is closed.
func changeRows(t *testing.T, s *mysql.Store, ws string, counts []int64, perSecond int, stop <-chan struct{}) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 5))
	z := rand.NewZipf(rng, fullSkew, 1, uint64(len(counts)-1))
	have := make(map[[3]int64]int64)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	w := fullWindow.Milliseconds()
	for round := 0; ; round++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now := time.Now().UnixMilli()
		seq := now / w
		batch := make([]global.Count, 0, perSecond/10)
		region := 1 + rng.IntN(fullRegions-1)
		for range cap(batch) {
			k := int(z.Uint64())
			c := have[[3]int64{int64(k), int64(region), seq}]
			if c == 0 {
				c = counts[k]
			}
			have[[3]int64{int64(k), int64(region), seq}] = c + 1
			batch = append(batch, global.Count{Cell: origin.Cell{Key: fullKey(ws, k), Sequence: seq}, Count: c + 1, ExpiresAt: (seq + 2) * w})
		}
		if err := s.Publish(ctx, "r"+strconv.Itoa(region), batch, now); err != nil {
			t.Errorf("changing rows: %v", err)
			return
		}
		for r := 1; round%10 == 0 && r < fullRegions; r++ {
			if err := s.Announce(ctx, "r"+strconv.Itoa(r), now); err != nil {
				t.Errorf("announcing: %v", err)
				return
			}
		}
	}
}

// loadTally counts what fullSizeLoad sent.
type loadTally struct {
	n, failed atomic.Int64
	took      time.Duration
}

// fullSizeLoad sends rate requests a second to url until end, from 16
// clients, each request for an identity picked by scale-1m's Zipf law over
// a million, and calls every10s every 10 s with the time since it started.
func fullSizeLoad(t *testing.T, url string, rate int, end time.Time, every10s func(time.Duration)) *loadTally {
	const clients = 16
	hc := &http.Client{Transport: loadTransport(clients), Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	var tally loadTally
	begin := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			z := rand.NewZipf(rng, fullSkew, 1, fullIdentities-1)
			gap := time.Duration(float64(time.Second) * clients / float64(rate))
			for next := begin.Add(time.Duration(c) * gap / clients); next.Before(end); next = next.Add(gap) {
				time.Sleep(time.Until(next))
				if _, err := limitOverHTTP(hc, url, "full", "id-"+strconv.FormatUint(z.Uint64(), 10), fullLimit, fullWindow); err != nil {
					if tally.failed.Add(1) == 1 {
						t.Errorf("a request failed: %v", err)
					}
				}
				tally.n.Add(1)
			}
		})
	}
	for tick := time.NewTicker(10 * time.Second); ; {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-tick.C:
			every10s(time.Since(begin))
			continue
		case <-done:
		}
		tick.Stop()
		break
	}
	tally.took = time.Since(begin)
	return &tally
}

// nodeFigures are the figures reportNode reads from a node's /metrics.
type nodeFigures struct {
	heap, rss, cells, rounds, pulled, roundSeconds float64
}

var metricLine = regexp.MustCompile(`(?m)^(go_memstats_heap_inuse_bytes|process_resident_memory_bytes|sluice_cells_live|sluice_global_rounds_total\{outcome="ok"\}|sluice_global_rows_total\{kind="pulled"\}|sluice_global_round_seconds_sum|sluice_global_round_seconds_count|sluice_global_rounds_total\{outcome="error"\}) (\S+)$`)

// reportNode logs the node's heap, cells and global rounds and returns
// them.
func reportNode(t *testing.T, nd *node, elapsed time.Duration) nodeFigures {
	v := map[string]float64{}
	for _, m := range metricLine.FindAllStringSubmatch(nd.metrics(), -1) {
		v[m[1]], _ = strconv.ParseFloat(m[2], 64)
	}
	f := nodeFigures{
		heap: v["go_memstats_heap_inuse_bytes"], rss: v["process_resident_memory_bytes"], cells: v["sluice_cells_live"],
		rounds: v[`sluice_global_rounds_total{outcome="ok"}`], pulled: v[`sluice_global_rows_total{kind="pulled"}`],
		roundSeconds: v["sluice_global_round_seconds_sum"],
	}
	t.Logf("%5.0fs: heap in use %6.1f MB (resident %6.1f MB), %8.0f cells, %3.0f rounds ok (%.0f failed, %.3f s each on average), %8.0f cells pulled",
		elapsed.Seconds(), f.heap/1e6, f.rss/1e6, f.cells, f.rounds, v[`sluice_global_rounds_total{outcome="error"}`],
		f.roundSeconds/max(v["sluice_global_round_seconds_count"], 1), f.pulled)
	return f
}

// deleteRegionRows deletes the global layer's rows of the test's regions
// (r0 to r9) written since began: rows hold many cells each, and those of
// the test's workspace only.
func deleteRegionRows(t *testing.T, db *sql.DB, began time.Time) {
	if _, err := db.Exec("DELETE FROM sluice_global_batches WHERE region REGEXP '^r[0-9]$' AND changed_at >= ?",
		began.UTC().Add(-time.Second).Format("2006-01-02 15:04:05.000000")); err != nil {
		t.Logf("deleting the rows of the test's regions: %v", err)
	}
}

// envInt returns the integer in the environment variable name, or def.
func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}
