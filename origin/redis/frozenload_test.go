package redis

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin"
)

// The load of TestClusterFrozenMasterUnderLoad: loadCounters counters per
// master, each asked for ten times its limit per window, spread over two
// limiters (two nodes of one region), for loadWarm, then loadFrozen with
// master 0 frozen, then loadThawed after it thaws.
const (
	loadLimit    = 40
	loadWindow   = time.Second
	loadCounters = 8
	loadWarm     = 2 * time.Second
	loadFrozen   = 5 * time.Second
	loadThawed   = 3 * time.Second
	// loadTimeout is the limiter's default OriginTimeout and the origin's
	// default Timeout.
	loadTimeout = 250 * time.Millisecond
)

// loadSample is one request of the load.
type loadSample struct {
	counter  int
	at       time.Time // the request's Time: it names its window
	took     time.Duration
	admitted bool
	err      error
}

// loadNode is one limiter of the region, on a cluster client and origin of
// its own.
type loadNode struct {
	l     *sluice.Limiter
	o     *Origin
	rec   *recorder
	drops *dropLog
}

// dropLog is a slog handler that counts, per namespace and reason, the
// increments the limiter logs as dropped (never replayed to the origin).
type dropLog struct {
	mu    sync.Mutex
	drops map[[2]string]int64 // (namespace, reason) → increments
}

func (h *dropLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *dropLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *dropLog) WithGroup(string) slog.Handler            { return h }

func (h *dropLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "sluice: increments dropped; not replayed to the origin" {
		return nil
	}
	var ns, reason string
	var n int64
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "namespace":
			ns = a.Value.String()
		case "reason":
			reason = a.Value.String()
		case "increments":
			n = a.Value.Int64()
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.drops == nil {
		h.drops = map[[2]string]int64{}
	}
	h.drops[[2]string{ns, reason}] += n
	return nil
}

// dropped returns the increments of namespace ns dropped, by reason.
func (h *dropLog) dropped(ns string) map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int64{}
	for k, n := range h.drops {
		if k[0] == ns {
			out[k[1]] += n
		}
	}
	return out
}

func newLoadNode(t *testing.T, pc *privateCluster) *loadNode {
	t.Helper()
	n := &loadNode{rec: &recorder{}, drops: &dropLog{}}
	n.o = newOrigin(t, Config{Client: pc.client(), Observer: n.rec, MinTTL: time.Hour})
	var err error
	n.l, err = sluice.New(sluice.Config{Origin: n.o, Logger: slog.New(n.drops)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.l.Close() })
	return n
}

// runLoad sends each counter ten times its limit per window, half through
// each node, until stop is closed, and returns every request.
func runLoad(nodes []*loadNode, reqs []sluice.Request, stop <-chan struct{}) []loadSample {
	var (
		mu      sync.Mutex
		samples []loadSample
		wg      sync.WaitGroup
	)
	gap := loadWindow / (10 * loadLimit / time.Duration(len(nodes)))
	for ni, n := range nodes {
		for ci := range reqs {
			wg.Go(func() {
				var mine []loadSample
				due := time.Now().Add(gap * time.Duration(ni) / 2)
				for {
					select {
					case <-stop:
						mu.Lock()
						samples = append(samples, mine...)
						mu.Unlock()
						return
					case <-time.After(time.Until(due)):
					}
					due = due.Add(gap)
					req := reqs[ci]
					req.Time = time.Now()
					res, err := n.l.Ratelimit(context.Background(), req)
					mine = append(mine, loadSample{counter: ci, at: req.Time, took: time.Since(req.Time), admitted: err == nil && res.Success, err: err})
				}
			})
		}
	}
	wg.Wait()
	return samples
}

// TestClusterFrozenMasterUnderLoad freezes one master of a private 3-master
// cluster for loadFrozen while two limiters take ten times the limit of
// counters on every master. The counters on the healthy masters go on as
// if nothing happened: no request fails or waits for the origin timeout,
// the two nodes admit within 5% of the limit, nothing is dropped, and Redis
// holds each of their cells' admissions once. The counters on the frozen
// master are decided locally meanwhile and, after it thaws, Redis holds
// each admission of their new windows once.
func TestClusterFrozenMasterUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("freezes a master of a Redis Cluster of its own under load")
	}
	pc := startPrivateCluster(t, 3, false)
	nodes := []*loadNode{newLoadNode(t, pc), newLoadNode(t, pc)}
	ws := workspace(t)
	var reqs []sluice.Request
	var keys []origin.Key
	for m := range 3 {
		ns := map[bool]string{true: "frozen", false: "healthy"}[m == 0]
		for _, k := range pc.keysOn(m, loadCounters, ws, ns, loadWindow) {
			keys = append(keys, k)
			reqs = append(reqs, sluice.Request{Workspace: ws, Namespace: ns, Identifier: k.Identifier, Limit: loadLimit, Duration: loadWindow, Cost: 1})
		}
	}
	onFrozen := func(ci int) bool { return ci < loadCounters }

	stop := make(chan struct{})
	done := make(chan []loadSample, 1)
	go func() { done <- runLoad(nodes, reqs, stop) }()
	time.Sleep(loadWarm)
	frozeAt := time.Now()
	thaw := pc.freeze(0)
	time.Sleep(loadFrozen)
	thawedAt := time.Now()
	thaw()
	time.Sleep(loadThawed)
	close(stop)
	samples := <-done
	for _, n := range nodes {
		if err := n.l.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	checkFrozenLoad(t, samples, onFrozen, frozeAt, thawedAt)
	for i, n := range nodes {
		t.Logf("node %d: origin calls by master and outcome %v; breakers %v; increments dropped by reason: healthy %v, frozen %v",
			i, n.rec.byMaster(), n.o.BreakerStates(), n.drops.dropped("healthy"), n.drops.dropped("frozen"))
		if d := n.drops.dropped("healthy"); len(d) > 0 {
			t.Errorf("node %d dropped increments of counters on healthy masters: %v", i, d)
		}
	}
	checkConverged(t, nodes[0].o, keys, samples, onFrozen, thawedAt)
}

// checkFrozenLoad checks the requests sent while master 0 was frozen: no
// error, and on the healthy masters no wait for the origin timeout and at
// most 5% admitted over the limit, window by window.
func checkFrozenLoad(t *testing.T, samples []loadSample, onFrozen func(int) bool, frozeAt, thawedAt time.Time) {
	t.Helper()
	var healthy, frozen []time.Duration
	admitted := map[[2]int64]int64{} // (counter, window) → admitted
	for _, s := range samples {
		if s.err != nil {
			t.Fatalf("request on counter %d failed: %v", s.counter, s.err)
		}
		if s.admitted {
			admitted[[2]int64{int64(s.counter), s.at.UnixMilli() / loadWindow.Milliseconds()}]++
		}
		if s.at.Before(frozeAt) || !s.at.Before(thawedAt) {
			continue
		}
		if onFrozen(s.counter) {
			frozen = append(frozen, s.took)
		} else {
			healthy = append(healthy, s.took)
		}
	}
	slices.Sort(healthy)
	slices.Sort(frozen)
	p99 := func(d []time.Duration) time.Duration { return d[len(d)*99/100] }
	t.Logf("master 0 frozen for %v: counters on healthy masters %d requests, p50 %v p99 %v max %v; on the frozen master %d requests, p99 %v max %v",
		thawedAt.Sub(frozeAt).Round(time.Millisecond), len(healthy), healthy[len(healthy)/2], p99(healthy), healthy[len(healthy)-1],
		len(frozen), p99(frozen), frozen[len(frozen)-1])
	if p := p99(healthy); p >= loadTimeout {
		t.Errorf("p99 of the counters on healthy masters is %v: they wait for the frozen master (origin timeout %v)", p, loadTimeout)
	}
	over, limits, worst := overLimit(admitted, func(ci int) bool { return !onFrozen(ci) }, frozeAt, thawedAt)
	t.Logf("counters on healthy masters, whole windows of the freeze: %d admitted over %d of limits (%.2f%%), most in one window %d of %d",
		over, limits, 100*float64(over)/float64(max(limits, 1)), worst, loadLimit)
	if over*100 > limits*5 {
		t.Errorf("the two nodes admitted %d over %d of limits on healthy masters: more than 5%%", over, limits)
	}
	fOver, fLimits, fWorst := overLimit(admitted, onFrozen, frozeAt, thawedAt)
	t.Logf("counters on the frozen master (decided locally), whole windows of the freeze: %d admitted over %d of limits (%.2f%%), most in one window %d",
		fOver, fLimits, 100*float64(fOver)/float64(max(fLimits, 1)), fWorst)
}

// overLimit sums, over the counters that pick and the whole windows between
// from and to, the admissions over the limit and the limits, and returns
// the most admitted in one window.
func overLimit(admitted map[[2]int64]int64, pick func(int) bool, from, to time.Time) (over, limits, worst int64) {
	d := loadWindow.Milliseconds()
	for w := from.UnixMilli()/d + 1; (w+1)*d <= to.UnixMilli(); w++ {
		for ci := range loadCounters * 3 {
			if !pick(ci) {
				continue
			}
			a := admitted[[2]int64{int64(ci), w}]
			over += max(0, a-loadLimit)
			limits += loadLimit
			worst = max(worst, a)
		}
	}
	return over, limits, worst
}

// checkConverged checks that Redis holds each admission once: every cell
// of the counters on healthy masters, and the cells of the frozen master's
// counters whose window began a window after the thaw.
func checkConverged(t *testing.T, o *Origin, keys []origin.Key, samples []loadSample, onFrozen func(int) bool, thawedAt time.Time) {
	t.Helper()
	ctx := context.Background()
	admitted := map[origin.Cell]int64{}
	for _, s := range samples {
		if s.admitted {
			admitted[origin.Cell{Key: keys[s.counter], Sequence: s.at.UnixMilli() / loadWindow.Milliseconds()}]++
		}
	}
	firstAfter := thawedAt.UnixMilli()/loadWindow.Milliseconds() + 2
	var checked int
	for c, want := range admitted {
		ci := slices.Index(keys, c.Key)
		if onFrozen(ci) && c.Sequence < firstAfter {
			continue
		}
		counts, err := o.Load(ctx, c.Key, c.Sequence)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		checked++
		if counts.Current != want {
			t.Errorf("counter %d (frozen master: %v), window %d: Redis holds %d, the nodes admitted %d",
				ci, onFrozen(ci), c.Sequence, counts.Current, want)
		}
	}
	t.Logf("Redis holds each admission once in %d cells", checked)
}
