package e2e

import (
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// slidingModel is the single-node reference of docs/decisions.md,
// written independently of the engine: fixed cells per identifier, and the
// previous cell weighted by floor(prev * (d - elapsed) / d) with a 128-bit
// product.
type slidingModel struct {
	limit, d int64
	cells    map[string]map[int64]int64 // identifier -> seq -> count
}

func newSlidingModel(limit int64, d time.Duration) *slidingModel {
	return &slidingModel{limit: limit, d: d.Milliseconds(), cells: map[string]map[int64]int64{}}
}

// admit decides a request of cost 1 on id at t (Unix ms) and applies it.
func (m *slidingModel) admit(id string, t int64) bool {
	cells := m.cells[id]
	if cells == nil {
		cells = map[int64]int64{}
		m.cells[id] = cells
	}
	seq := t / m.d
	elapsed := t - seq*m.d
	hi, lo := bits.Mul64(uint64(cells[seq-1]), uint64(m.d-elapsed))
	weighted, _ := bits.Div64(hi, lo, uint64(m.d))
	if cells[seq]+int64(weighted)+1 > m.limit {
		return false
	}
	cells[seq]++
	return true
}

// sent is one request of the load and its answer.
type sent struct {
	id      int
	at      int64 // Unix ms: midway between sending and the answer
	success bool
	node    *node // the node it was sent to
}

// TestRegionAccuracyOverHTTP is the acceptance run of three `sluice serve`
// processes on one Redis: 20 identifiers each at 10× its limit, for three
// windows, every request sent to a node picked at random. The total
// admitted must be within ±1% of what the single-node reference model admits
// for the merged stream (the requests ordered by time), and no identifier
// may see more than 1.05 × its limit admitted in any span of one window
// (5 s). It runs with ratelimit.limit, and with ratelimit.multiLimit of
// two checks (the identifier's and a shared counter that never runs out):
// batches are held to the same band as single requests. The measured
// figures are logged.
func TestRegionAccuracyOverHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("15 s of load on three processes")
	}
	for _, tc := range []struct {
		name string
		send sender
	}{
		{"limit", limitOverHTTP},
		{"multiLimit", multiLimitOverHTTP},
	} {
		t.Run(tc.name, func(t *testing.T) { testRegionAccuracy(t, tc.send) })
	}
}

func testRegionAccuracy(t *testing.T, send sender) {
	const (
		ids       = 20
		limit     = 50
		d         = 5 * time.Second
		windows   = 3
		tolerance = 0.01
	)
	url := "redis://" + testenv.RedisAddr(t) + "/0"
	ws := fmt.Sprintf("e2e-accuracy-%d", time.Now().UnixNano())
	nodes := make([]*node, 3)
	for i := range nodes {
		nodes[i] = start(t, nil, "--redis-url", url, "--root-key", rk+":"+ws)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()

	// Each identifier gets 10 × limit requests per window, evenly spaced,
	// at its own phase; the node of each request is random. The load
	// starts on a cell boundary. Started mid-cell, the first cell's burst
	// and the next cell's admissions can share one window-long span up to
	// 1.5 × the limit even in the reference model: the sliding window
	// weighs the previous cell as if its requests were spread evenly.
	run := windows * d
	ms := d.Milliseconds()
	begin := time.UnixMilli((time.Now().Add(200*time.Millisecond).UnixMilli()/ms + 1) * ms)
	out := spreadLoadWith(send, 10, func(time.Time) []*node { return nodes }, "accuracy", 1, ids, limit, d, begin, run)
	if len(out.failures) > 0 {
		t.Fatalf("%d requests failed; first: %s", len(out.failures), out.failures[0])
	}
	results, late := out.results, out.late

	// The reference on the merged stream, in time order.
	model := newSlidingModel(limit, d)
	var engine, reference int
	admittedAt := make([][]int64, ids)
	modelAt := make([][]int64, ids)
	perWindow := make([][2]int, windows+1) // admitted by the nodes and the model, per cell
	cellOf := func(at int64) int { return min(windows, max(0, int((at-begin.UnixMilli())/ms))) }
	for _, r := range results {
		if r.success {
			perWindow[cellOf(r.at)][0]++
		}
		if r.success {
			engine++
			admittedAt[r.id] = append(admittedAt[r.id], r.at)
		}
		if model.admit(strconv.Itoa(r.id), r.at) {
			reference++
			perWindow[cellOf(r.at)][1]++
			modelAt[r.id] = append(modelAt[r.id], r.at)
		}
	}
	worst, worstID := busiestSpan(admittedAt, ms)
	modelWorst, _ := busiestSpan(modelAt, ms)
	deviation := float64(engine-reference) / float64(reference)
	t.Logf("%d requests over %v (3 nodes, %d identifiers at 10× %d per %v; latest start %v behind schedule): admitted %d, reference model %d (%+.2f%%); busiest %v span: %d admitted for user-%d (%.3f × the limit; the model's busiest: %d)",
		len(results), run, ids, limit, d, late.Round(time.Millisecond), engine, reference, 100*deviation, d, worst, worstID, float64(worst)/limit, modelWorst)
	t.Logf("admitted per window (nodes, model): %v; load average %s", perWindow[:windows], loadavg())
	calls := map[string]float64{}
	for _, n := range nodes {
		originCalls(t, hc, n.Admin, calls)
	}
	t.Logf("origin calls of the three nodes: %v (%.4f synchronous calls per request)", calls,
		(calls["hydrate"]+calls["strict"]+calls["refresh"])/float64(len(results)))
	if deviation > tolerance || deviation < -tolerance {
		t.Errorf("admitted %d, reference %d: %+.2f%%, beyond ±%.0f%%", engine, reference, 100*deviation, 100*tolerance)
	}
	if float64(worst) > 1.05*limit {
		t.Errorf("user-%d had %d admitted within %v, above 1.05 × its limit of %d", worstID, worst, d, limit)
	}
}

// busiestSpan returns the most admissions of one identifier within a span
// of span ms, and that identifier. ats holds each identifier's admission
// times in order.
func busiestSpan(ats [][]int64, span int64) (most, id int) {
	for k, times := range ats {
		j := 0
		for i := range times {
			for times[i]-times[j] >= span {
				j++
			}
			if n := i - j + 1; n > most {
				most, id = n, k
			}
		}
	}
	return most, id
}

// loadavg returns the machine's 1-minute load average, for the log.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}

// originCalls adds a node's synchronous origin calls by reason, and its
// replay calls, from its /metrics, to calls.
func originCalls(t *testing.T, hc *http.Client, url string, calls map[string]float64) {
	t.Helper()
	res, err := hc.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "sluice_origin_read_duration_seconds_count":
			_, reason, _ := strings.Cut(labels, `reason="`)
			reason, _, _ = strings.Cut(reason, `"`)
			calls[reason] += n
		case "sluice_replay_duration_seconds_count":
			calls["replay"] += n
		}
	}
}

// loadResult is what a spreadLoad sent: the answers in time order, the
// requests that failed, and the most a request started behind schedule.
type loadResult struct {
	results  []sent
	failures []string
	late     time.Duration
}

// spreadLoad sends each of ids identifiers (namespace ns) 10 × limit
// requests per window d, evenly spaced from begin for run at a phase of its
// own, each to a node picked at random among those nodes returns for the
// instant the request is sent (its due time, or later when the senders lag
// behind: a node about to be stopped gets no request sent late); seed
// drives the phases and the picks. 48 workers send them.
func spreadLoad(nodes func(at time.Time) []*node, ns string, seed uint64, ids, limit int, d time.Duration, begin time.Time, run time.Duration) loadResult {
	return spreadLoadAt(10, nodes, ns, seed, ids, limit, d, begin, run)
}

// spreadLoadAt is spreadLoad at load × limit requests per window.
func spreadLoadAt(load float64, nodes func(at time.Time) []*node, ns string, seed uint64, ids, limit int, d time.Duration, begin time.Time, run time.Duration) loadResult {
	return spreadLoadWith(limitOverHTTP, load, nodes, ns, seed, ids, limit, d, begin, run)
}

// sender sends one request of an identifier to a node and reports whether
// it passed: limitOverHTTP or multiLimitOverHTTP.
type sender func(hc *http.Client, baseURL, namespace, identifier string, limit int, d time.Duration) (bool, error)

// spreadLoadWith is spreadLoadAt with each request sent by send.
func spreadLoadWith(send sender, load float64, nodes func(at time.Time) []*node, ns string, seed uint64, ids, limit int, d time.Duration, begin time.Time, run time.Duration) loadResult {
	const workers = 48
	type job struct {
		id   int
		pick uint64 // picks the node among those live when it is sent
		due  time.Time
	}
	gap := time.Duration(float64(d) / (load * float64(limit)))
	rng := rand.New(rand.NewPCG(seed, seed+1))
	var schedule []job
	for id := range ids {
		phase := time.Duration(rng.Int64N(int64(gap)))
		for at := phase; at < run; at += gap {
			schedule = append(schedule, job{id: id, pick: rng.Uint64(), due: begin.Add(at)})
		}
	}
	slices.SortFunc(schedule, func(a, b job) int { return a.due.Compare(b.due) })
	hc := &http.Client{Timeout: 10 * time.Second, Transport: loadTransport(workers)}
	defer hc.CloseIdleConnections()
	var (
		mu   sync.Mutex
		out  loadResult
		pool sync.WaitGroup
	)
	jobs := make(chan job, 1024)
	for range workers {
		pool.Go(func() {
			for j := range jobs {
				lag := time.Since(j.due)
				before := time.Now()
				live := nodes(before)
				n := live[j.pick%uint64(len(live))]
				passed, err := send(hc, n.URL, ns, "user-"+strconv.Itoa(j.id), limit, d)
				after := time.Now()
				mu.Lock()
				out.late = max(out.late, lag)
				if err != nil {
					out.failures = append(out.failures, n.URL+": "+err.Error())
				} else {
					out.results = append(out.results, sent{id: j.id, at: (before.UnixMilli() + after.UnixMilli()) / 2, success: passed, node: n})
				}
				mu.Unlock()
			}
		})
	}
	for _, j := range schedule {
		time.Sleep(time.Until(j.due))
		jobs <- j
	}
	close(jobs)
	pool.Wait()
	slices.SortStableFunc(out.results, func(a, b sent) int { return int(a.at - b.at) })
	return out
}
