package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// cellCollector reads every cell of one Redis all along and keeps the
// highest total (field n) seen of each key. Cells expire (15 s after their
// first write for 5 s windows) and a killed Redis loses them, so the
// origin's count of a phase is what the cells held at their highest. A
// cell's total only grows while it lives: the highest is the last.
//
// Every read also checks the grow-only counter's invariant: a cell's total
// is the sum of its writers' shares (both scripts raise them together).
// A write counted twice at the origin breaks it, whatever the slack of
// the comparison with the nodes' metrics.
type cellCollector struct {
	client *goredis.Client
	mu     sync.Mutex
	most   map[string]int64
	broken map[string]string // cells whose total was not the sum of their shares, as first read
	stop   chan struct{}
	done   chan struct{}
}

// startCellCollector reads the cells of the Redis at addr every 300 ms,
// directly (not through a proxy), until the test ends.
func startCellCollector(t *testing.T, addr string) *cellCollector {
	c := &cellCollector{
		client: goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, PoolSize: 2,
			DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond}),
		most:   map[string]int64{},
		broken: map[string]string{},
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go c.run()
	t.Cleanup(func() { close(c.stop); <-c.done; _ = c.client.Close() })
	return c
}

func (c *cellCollector) run() {
	defer close(c.done)
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
			_ = c.read() // a frozen or killed Redis is read again next tick
		}
	}
}

// read reads every cell once.
func (c *cellCollector) read() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var keys []string
	iter := c.client.Scan(ctx, 0, "sl2:*", 1000).Iterator()
	for iter.Next(ctx) {
		if !strings.HasPrefix(iter.Val(), "sl2:{global}:") { // the global layer's lease and queue, not cells
			keys = append(keys, iter.Val())
		}
	}
	if err := iter.Err(); err != nil || len(keys) == 0 {
		return err
	}
	pipe := c.client.Pipeline()
	cells := make([]*goredis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cells[i] = pipe.HGetAll(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range keys {
		n, shares, err := cellTotals(cells[i].Val())
		if _, seen := c.broken[k]; (err != nil || n != shares) && !seen {
			c.broken[k] = fmt.Sprintf("%s: %v (%v)", k, cells[i].Val(), err)
		}
		c.most[k] = max(c.most[k], n)
	}
	return nil
}

// cellTotals returns a cell hash's total (field n) and the sum of its
// writers' shares (every other field but those of the other regions'
// counts: i, the imported count, s, their sum, and g:<region>, each
// region's). An expired cell is empty: 0, 0.
func cellTotals(fields map[string]string) (n, shares int64, err error) {
	for f, v := range fields {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("field %s: %w", f, err)
		}
		switch {
		case f == "n":
			n = x
		case f == "i", f == "s", strings.HasPrefix(f, "g:"):
		default:
			shares += x
		}
	}
	return n, shares, nil
}

// brokenCells returns the cells whose total was not the sum of their
// shares, as first read, in order.
func (c *cellCollector) brokenCells() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Values(c.broken))
}

// sync reads every cell now, failing t if Redis does not answer within 10 s.
func (c *cellCollector) sync(t *testing.T) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = c.read(); err == nil {
			return
		}
	}
	t.Fatalf("reading the cells: %v", err)
}

// total is the sum of the highest totals of the cells of workspace ws and
// namespace ns whose identifier starts with prefix.
func (c *cellCollector) total(ws, ns, prefix string) (sum int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.most {
		if w, s, id, ok := cellIdentity(k); ok && w == ws && s == ns && strings.HasPrefix(id, prefix) {
			sum += n
		}
	}
	return sum
}

// cellIdentity decodes the workspace, namespace and identifier of a cell
// key (sl2:{tag}:<len>:<ws>:<len>:<ns>:<len>:<id>:…, see
// docs/regional-origins.md).
func cellIdentity(key string) (ws, ns, id string, ok bool) {
	_, rest, ok := strings.Cut(key, "}:")
	if !ok {
		return "", "", "", false
	}
	var fields [3]string
	for i := range fields {
		l, after, found := strings.Cut(rest, ":")
		n, err := strconv.Atoi(l)
		if !found || err != nil || n < 0 || n > len(after) {
			return "", "", "", false
		}
		fields[i], rest = after[:n], strings.TrimPrefix(after[n:], ":")
	}
	return fields[0], fields[1], fields[2], true
}

// dropReasons are the reasons of sluice_replay_dropped_increments_total.
var dropReasons = []string{"expired", "refused", "close"}

// tally is what a region's nodes reported, summed over the nodes up and
// those stopped (as last scraped, plus the drops their last logs report).
type tally struct {
	passed, denied float64    // decisions of the namespace
	dropped        [3]float64 // increments given up on, by dropReasons (all namespaces)
	strictErrors   float64    // failed origin decisions (all namespaces)
	// unsure counts the Redis decide calls that failed after they may have
	// reached Redis (a timeout, a connection lost, an error reply), not
	// those the breaker refused: the decisions that may have landed.
	unsure float64
}

func (a tally) minus(b tally) tally {
	d := tally{passed: a.passed - b.passed, denied: a.denied - b.denied, strictErrors: a.strictErrors - b.strictErrors, unsure: a.unsure - b.unsure}
	for i := range d.dropped {
		d.dropped[i] = a.dropped[i] - b.dropped[i]
	}
	return d
}

// drops is every increment given up on.
func (a tally) drops() float64 { return a.dropped[0] + a.dropped[1] + a.dropped[2] }

// add adds one node's metrics.
func (a *tally) add(metrics, ns string) {
	if ns != "" {
		a.passed += sampleSum(metrics, "sluice_ratelimit_decisions_total", `namespace="`+ns+`"`, `outcome="passed"`)
		a.denied += sampleSum(metrics, "sluice_ratelimit_decisions_total", `namespace="`+ns+`"`, `outcome="denied"`)
	}
	for i, reason := range dropReasons {
		a.dropped[i] += sampleSum(metrics, "sluice_replay_dropped_increments_total", `reason="`+reason+`"`)
	}
	a.strictErrors += sampleSum(metrics, "sluice_origin_read_duration_seconds_count", `reason="strict"`, `result="error"`)
	for _, outcome := range []string{"timeout", "unavailable", "error"} {
		a.unsure += sampleSum(metrics, "sluice_redis_call_duration_seconds_count", `op="decide"`, `outcome="`+outcome+`"`)
	}
}

// retiredNode is a node stopped during the run: its last scrape, and the
// increments its log reports dropped after it, by dropReasons.
type retiredNode struct {
	region    string
	metrics   string
	lateDrops [3]float64
}

// nodeMetrics is one node's metrics at a snapshot.
type nodeMetrics struct {
	region, text string
	lateDrops    [3]float64
}

// metricsSnapshot is every node's metrics at one moment, those stopped as
// last scraped.
type metricsSnapshot []nodeMetrics

// snapshot scrapes every node up.
func (r *chaosRig) snapshot() metricsSnapshot {
	var snap metricsSnapshot
	for _, n := range r.lb.all() {
		snap = append(snap, nodeMetrics{region: n.region, text: n.metrics()})
	}
	for _, n := range r.retired {
		snap = append(snap, nodeMetrics{region: n.region, text: n.metrics, lateDrops: n.lateDrops})
	}
	return snap
}

// tally sums the snapshot of region's nodes, for namespace ns ("": only
// the counters of every namespace).
func (s metricsSnapshot) tally(region, ns string) tally {
	var t tally
	for _, n := range s {
		if n.region != region {
			continue
		}
		t.add(n.text, ns)
		for i, d := range n.lateDrops {
			t.dropped[i] += d
		}
	}
	return t
}

// settleQuiet is how long no node may have replayed anything before the
// cells are read: longer than a parked cell waits for its replay
// (RefreshAfter, 5 s by default) and than the replay backoff's cap (1 s),
// so nothing is waiting for replay then.
const settleQuiet = 6 * time.Second

// settle waits until no node has replayed anything for settleQuiet, and
// no request is in flight on any node, then reads both regions' cells.
func (r *chaosRig) settle() {
	t := r.t
	t.Helper()
	replays := func() []float64 {
		var v []float64
		for _, n := range r.lb.all() {
			m := n.metrics()
			v = append(v, sampleSum(m, "sluice_replay_duration_seconds_count"), sampleSum(m, "sluice_http_requests_in_flight"))
		}
		return v
	}
	quiet := func(last, now []float64) bool {
		for i := 1; i < len(now); i += 2 {
			if now[i] != 0 {
				return false
			}
		}
		return slices.Equal(last, now)
	}
	start := time.Now()
	for last := replays(); ; {
		time.Sleep(settleQuiet)
		now := replays()
		if quiet(last, now) {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("replays did not go quiet within 30 s: %v", now)
		}
		last = now
	}
	for _, c := range r.cells {
		c.sync(t)
	}
}

// TestCellTotals: a cell's writers' shares leave out the fields of the
// other regions' counts.
func TestCellTotals(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fields    map[string]string
		n, shares int64
	}{
		{"writers", map[string]string{"n": "5", "00000000000000a1": "2", "00000000000000b2": "3"}, 5, 5},
		{"imports apart", map[string]string{"n": "5", "00000000000000a1": "5", "i": "20", "s": "20", "g:us": "20"}, 5, 5},
		{"expired", map[string]string{}, 0, 0},
	} {
		n, shares, err := cellTotals(tc.fields)
		if err != nil || n != tc.n || shares != tc.shares {
			t.Errorf("%s: %d, %d, %v; want %d, %d", tc.name, n, shares, err, tc.n, tc.shares)
		}
	}
}
