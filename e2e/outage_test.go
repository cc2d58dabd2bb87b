package e2e

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/internal/testenv"
)

// Outages under load: a `sluice serve` process answers a steady load while
// its Redis origin is killed or frozen, or its MariaDB (global layer and
// store) stops answering. Decisions never wait on a failing service past
// the origin timeout, and once the circuit breaker is open not at all; no
// request fails; the node recovers when the service comes back. The figures
// each test logs are recorded in docs/benchmarks/outages.md.

const (
	outageRate   = 500 // requests per second
	outageIDs    = 50  // identifiers, sent round-robin
	outageWindow = time.Second
	// outageOriginTimeout is the limiter's default OriginTimeout (and the
	// Redis origin's default Timeout): `sluice serve` has no flag for it.
	outageOriginTimeout = 250 * time.Millisecond
	// outageP99 is the most the 99th percentile may be during an outage
	// once the breaker is open (for a killed Redis, during all of it).
	outageP99 = 50 * time.Millisecond
	// outageMargin is what a request may take past the origin timeout on a
	// busy 2-core machine: HTTP over loopback, scheduling.
	outageMargin = 150 * time.Millisecond
	// outageWarm and outageFor are the load before the fault and the
	// length of the fault.
	outageWarm = 2 * time.Second
	outageFor  = 3 * time.Second
	// outageLead is how long before a window boundary the fault starts:
	// the worst moment, when every counter's next cell is cold and is
	// hydrated from the origin within the first origin timeout of the
	// fault, before the breaker can have seen a timeout.
	outageLead = 10 * time.Millisecond
)

// sample is one request of a steadyLoad.
type sample struct {
	id    int // user-<id>
	start time.Time
	took  time.Duration
	err   error
}

// steadyLoad sends outageRate limit requests per second, over outageIDs
// identifiers of one namespace, each from a goroutine of its own (an open
// loop: a slow answer does not delay the next request). Odd identifiers ask
// for 8 per window, less than the 10 they send, so they are denied and
// enter strict mode (decisions at the origin); even ones ask for 1,000. The
// window is one second, so every counter is hydrated from the origin again
// each second.
type steadyLoad struct {
	stop chan struct{}
	done chan []sample
}

// startSteadyLoad starts a steadyLoad on the node at baseURL.
func startSteadyLoad(baseURL, namespace string) *steadyLoad {
	l := &steadyLoad{stop: make(chan struct{}), done: make(chan []sample, 1)}
	go l.run(baseURL, namespace)
	return l
}

// run sends the requests on schedule until stop, then hands every sample
// to done.
func (l *steadyLoad) run(baseURL, namespace string) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: loadTransport(256)}
	defer hc.CloseIdleConnections()
	var (
		mu      sync.Mutex
		samples []sample
		wg      sync.WaitGroup
	)
	gap := time.Second / outageRate
	due := time.Now()
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			wg.Wait()
			l.done <- samples
			return
		case <-time.After(time.Until(due)):
		}
		due = due.Add(gap)
		id := i % outageIDs
		limit := 1000
		if id%2 == 1 {
			limit = 8
		}
		wg.Go(func() {
			start := time.Now()
			_, err := limitOverHTTP(hc, baseURL, namespace, "user-"+strconv.Itoa(id), limit, outageWindow)
			s := sample{id: id, start: start, took: time.Since(start), err: err}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
		})
	}
}

// finish stops the load, waits for the requests in flight and returns every
// request sent.
func (l *steadyLoad) finish() []sample {
	close(l.stop)
	return <-l.done
}

// latencyStats summarises the requests that started in a span of time.
type latencyStats struct {
	n             int
	p50, p99, max time.Duration
	over          int      // requests that took longer than outageP99
	errs          []string // the first errors
	errCount      int
}

func (s latencyStats) String() string {
	return fmt.Sprintf("%d requests, p50 %v, p99 %v, max %v, %d over %v, %d errors",
		s.n, s.p50.Round(10*time.Microsecond), s.p99.Round(10*time.Microsecond), s.max.Round(10*time.Microsecond),
		s.over, outageP99, s.errCount)
}

// statsOf returns the stats of the samples that started in [from, to).
func statsOf(samples []sample, from, to time.Time) latencyStats {
	var st latencyStats
	var took []time.Duration
	for _, s := range samples {
		if s.start.Before(from) || !s.start.Before(to) {
			continue
		}
		if s.err != nil {
			st.errCount++
			if len(st.errs) < 5 {
				st.errs = append(st.errs, s.err.Error())
			}
			continue
		}
		took = append(took, s.took)
		if s.took > outageP99 {
			st.over++
		}
	}
	slices.Sort(took)
	st.n = len(took) + st.errCount
	if len(took) > 0 {
		st.p50 = took[(len(took)-1)/2]
		st.p99 = took[(len(took)*99+99)/100-1]
		st.max = took[len(took)-1]
	}
	return st
}

// sampleSum sums the samples of the metric name in a Prometheus text
// exposition whose labels include every one of labels (name="value").
func sampleSum(text, name string, labels ...string) float64 {
	var sum float64
	for line := range strings.SplitSeq(text, "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		if slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(line, l) }) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// primeOutage creates the namespace and an override (so that the request
// path has both in memory) and sends one request per identifier.
func primeOutage(t *testing.T, n *node, namespace string) {
	t.Helper()
	n.setOverride(rk, namespace, "user-0", 5, outageWindow.Milliseconds())
	hc := &http.Client{Timeout: 5 * time.Second}
	for id := range outageIDs {
		if _, err := limitOverHTTP(hc, n.URL, namespace, "user-"+strconv.Itoa(id), 1000, outageWindow); err != nil {
			t.Fatalf("priming user-%d: %v\n%s", id, err, n.logs())
		}
	}
}

// outageRun is the timeline of one outage test.
type outageRun struct {
	samples       []sample
	fault, healed time.Time
}

// runOutage primes n, loads it for outageWarm, calls fault outageLead
// before a window boundary, loads it for outageFor, calls heal, then waits (loaded) until the check heal returned
// holds and loads it one more second.
func runOutage(t *testing.T, n *node, fault func(), heal func() (recovered func() bool)) outageRun {
	t.Helper()
	const ns = "outage"
	primeOutage(t, n, ns)
	load := startSteadyLoad(n.URL, ns)
	defer func() {
		if load != nil {
			load.finish()
		}
	}()
	time.Sleep(outageWarm)
	next := time.Now().Truncate(outageWindow).Add(outageWindow - outageLead)
	if time.Until(next) < 0 {
		next = next.Add(outageWindow)
	}
	time.Sleep(time.Until(next))
	var r outageRun
	r.fault = time.Now()
	fault()
	time.Sleep(outageFor)
	r.healed = time.Now()
	recovered := heal()
	waitFor(t, 10*time.Second, "the node to recover", recovered)
	t.Logf("recovered %v after the service came back", time.Since(r.healed).Round(time.Millisecond))
	time.Sleep(time.Second)
	r.samples, load = load.finish(), nil
	return r
}

// checkNoErrors fails t if any request of the run failed.
func (r outageRun) checkNoErrors(t *testing.T) {
	t.Helper()
	if all := statsOf(r.samples, time.Time{}, time.Now()); all.errCount > 0 {
		t.Errorf("%d of %d requests failed, first: %q", all.errCount, all.n, all.errs)
	}
}

// logStats logs the stats of the run before, during and after the fault.
func (r outageRun) logStats(t *testing.T) (during latencyStats) {
	t.Helper()
	before := statsOf(r.samples, r.fault.Add(-outageWarm+500*time.Millisecond), r.fault)
	during = statsOf(r.samples, r.fault, r.healed)
	after := statsOf(r.samples, r.healed, time.Now())
	t.Logf("before the fault: %v", before)
	t.Logf("during the fault: %v", during)
	t.Logf("after it:         %v", after)
	return during
}

// logSlow logs the requests that took longer than limit, with when they
// started.
func (r outageRun) logSlow(t *testing.T, limit time.Duration) {
	t.Helper()
	for _, s := range r.samples {
		if s.took > limit {
			t.Logf("user-%d, started %v after the fault, took %v", s.id, s.start.Sub(r.fault).Round(time.Millisecond), s.took.Round(time.Millisecond))
		}
	}
}

// checkBreakerOpen fails t unless n's Redis breaker is open or half-open:
// the node has seen the outage.
func checkBreakerOpen(t *testing.T, n *node) {
	t.Helper()
	if sampleSum(n.metrics(), "sluice_redis_breaker_state") == 0 {
		t.Errorf("the Redis breaker is closed %v into the outage", outageFor)
	}
}

// redisRecovered returns a check that the Redis origin's breaker is closed
// and an apply succeeded since the call.
func redisRecovered(n *node) func() bool {
	applied := sampleSum(n.metrics(), "sluice_redis_call_duration_seconds_count", `op="apply"`, `outcome="ok"`)
	return func() bool {
		m := n.metrics()
		return sampleSum(m, "sluice_redis_breaker_state") == 0 &&
			sampleSum(m, "sluice_redis_call_duration_seconds_count", `op="apply"`, `outcome="ok"`) > applied
	}
}

// TestOutageRedisKilled kills the Redis origin (SIGKILL) under load: every
// connection is refused at once, so no request may wait (p99 within
// outageP99 over the whole outage). Redis restarts empty and the node
// writes to it again.
func TestOutageRedisKilled(t *testing.T) {
	rs := testenv.StartRedis(t)
	n := start(t, nil, "--redis-url", "redis://"+rs.Addr+"/0", "--root-key", rk+":outage")
	r := runOutage(t, n, rs.Stop, func() func() bool {
		checkBreakerOpen(t, n)
		rs.Start()
		return redisRecovered(n)
	})
	during := r.logStats(t)
	r.checkNoErrors(t)
	if during.p99 > outageP99 {
		t.Errorf("p99 %v while Redis was down, want at most %v (%v)", during.p99, outageP99, during)
	}
}

// TestOutageRedisFrozen freezes the Redis origin (SIGSTOP) under load: the
// kernel still accepts connections and nothing answers. A request may wait
// for the origin timeout until the breaker opens, never longer; from one
// second into the outage on, p99 is within outageP99. SIGCONT heals it.
func TestOutageRedisFrozen(t *testing.T) {
	rs := testenv.StartRedis(t)
	n := start(t, nil, "--redis-url", "redis://"+rs.Addr+"/0", "--root-key", rk+":outage")
	r := runOutage(t, n, func() { rs.Signal(syscall.SIGSTOP) }, func() func() bool {
		checkBreakerOpen(t, n)
		rs.Signal(syscall.SIGCONT)
		return redisRecovered(n)
	})
	during := r.logStats(t)
	open := statsOf(r.samples, r.fault.Add(time.Second), r.healed)
	t.Logf("from 1s into it: %v", open)
	r.checkNoErrors(t)
	if limit := outageOriginTimeout + outageMargin; during.max > limit {
		t.Errorf("a request took %v while Redis was frozen, want at most the origin timeout %v + %v", during.max, outageOriginTimeout, outageMargin)
		r.logSlow(t, limit)
	}
	if open.p99 > outageP99 {
		t.Errorf("p99 %v from one second into the freeze, want at most %v (%v)", open.p99, outageP99, open)
	}
}

// TestOutageMySQLBlackholed runs a node with the global layer and the
// store on MariaDB, through a proxy that stops forwarding (accepts, reads,
// never answers) under load. Neither the global layer nor the store is on
// the request path: p99 stays within outageP99 and no request comes near the
// origin timeout. When the proxy forwards again, global rounds and store
// refreshes succeed again.
func TestOutageMySQLBlackholed(t *testing.T) {
	dc, err := driver.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	px := newFreezeProxy(t, dc.Addr)
	dc.Addr = px.Addr()
	ws := fmt.Sprintf("e2e-outage-%d", time.Now().UnixNano())
	n := start(t, nil, "--mysql-dsn", dc.FormatDSN(), "--region", "outage", "--root-key", rk+":"+ws,
		"--global-interval", "200ms", "--denial-min-window", "1s")
	var roundsAtFault float64
	fault := func() {
		roundsAtFault = sampleSum(n.metrics(), "sluice_global_rounds_total", `outcome="ok"`)
		px.freeze()
	}
	r := runOutage(t, n, fault, func() func() bool {
		m := n.metrics()
		rounds := sampleSum(m, "sluice_global_rounds_total", `outcome="ok"`)
		refreshes := sampleSum(m, "sluice_store_refresh_duration_seconds_count", `result="ok"`)
		if rounds > roundsAtFault+1 { // one round may have been ending as the proxy froze
			t.Errorf("%v global rounds succeeded while the proxy was frozen: MariaDB was not cut off", rounds-roundsAtFault)
		}
		px.thaw()
		return func() bool {
			m := n.metrics()
			return sampleSum(m, "sluice_global_rounds_total", `outcome="ok"`) > rounds &&
				sampleSum(m, "sluice_store_refresh_duration_seconds_count", `result="ok"`) > refreshes
		}
	})
	during := r.logStats(t)
	r.checkNoErrors(t)
	if during.p99 > outageP99 {
		t.Errorf("p99 %v while MariaDB hung, want at most %v (%v)", during.p99, outageP99, during)
	}
	if during.max >= outageOriginTimeout {
		t.Errorf("a request took %v while MariaDB hung: something on the request path waited for it", during.max)
	}
}

// freezeProxy is a TCP proxy in front of upstream that can stop forwarding.
// While frozen it still accepts connections and reads what either side
// sends, but delivers nothing: a server that hangs, or a path that drops
// every packet, as the client sees it.
type freezeProxy struct {
	t        *testing.T
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	thawed chan struct{} // closed while not frozen
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newFreezeProxy(t *testing.T, upstream string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{t: t, ln: ln, upstream: upstream, thawed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.thawed)
	p.wg.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's listening address.
func (p *freezeProxy) Addr() string { return p.ln.Addr().String() }

func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default: // already frozen
	}
}

func (p *freezeProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// gate returns a channel that is closed while the proxy forwards.
func (p *freezeProxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.thawed
}

// track adds c to the open connections; false once the proxy is closed.
func (p *freezeProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *freezeProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Go(func() { p.relay(c) })
	}
}

// relay connects c to the upstream and copies both ways until either side
// closes.
func (p *freezeProxy) relay(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil || !p.track(up) {
		p.untrack(c)
		if up != nil {
			_ = up.Close()
		}
		return
	}
	var both sync.WaitGroup
	both.Go(func() { p.copy(up, c) })
	both.Go(func() { p.copy(c, up) })
	both.Wait()
}

// untrack closes c and forgets it.
func (p *freezeProxy) untrack(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// copy forwards what src sends to dst, holding each chunk while the proxy
// is frozen; it closes both when either fails.
func (p *freezeProxy) copy(dst, src net.Conn) {
	defer func() { p.untrack(dst); p.untrack(src) }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// close stops the proxy, closes every connection and waits for its
// goroutines.
func (p *freezeProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.thaw()
	p.wg.Wait()
}
