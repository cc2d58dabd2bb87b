package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestChaos runs two regions of real `sluice serve` processes under load
// while faults are injected at random, and checks that no request fails,
// that admissions stay within a measured band of the exact model, and that
// the regional origin holds each admitted increment once.
//
// Region a is three nodes on a redis-server of the test's own, reached
// through an in-process toxiproxy; region b is two nodes on another; both
// share a global layer and store on MariaDB through a second toxiproxy.
// The run is a sequence of rounds, each of two phases with namespaces of
// their own (so that the servers' per-namespace metrics and the origin's
// cells of one phase are told apart from the others'):
//
//   - mixed: faults drawn at random on two lanes, one at a time per lane,
//     with random gaps: region a's Redis gets 60 ms of latency, connection
//     resets or SIGSTOP/SIGCONT; MariaDB is cut (the proxy stops), slowed
//     or reset, or one node is drained like a load balancer would (no new
//     requests, in-flight ones finished, metrics scraped), SIGTERMed and
//     started again.
//   - kill: region a's Redis is SIGKILLed once and restarted empty on the
//     same port, while the MariaDB lane goes on. Once it is back the load
//     moves to a second set of namespaces, whose cells never lived in the
//     Redis that was killed.
//
// Three kinds of identifiers (see idClass): patient ones at 5 × their
// limit, whose clients see every answer; over ones at 2 × their limit and
// near ones at 0.85 × their limit (in a namespace of their own), whose
// clients cancel every request after 1-8 ms.
//
// Between phases the faults are healed and the load stops; once every
// node's replays have gone quiet, each region's cells are read and every
// node scraped. The checks:
//
//  1. no request failed: a status other than 200, or a transport error on a
//     request its client did not cancel, is an error;
//  2. the admissions of the patient identifiers, per window and per phase,
//     are within chaosBand of the single-node model of the merged stream;
//  3. per region and namespace, the origin's count (the sum of field n of
//     the cells, the highest value seen of each, read all along because
//     cells expire) against the passed decisions the nodes report
//     (sluice_ratelimit_decisions_total, cost 1; a restarted node's
//     scraped before its SIGTERM): passed − dropped ≤ origin ≤ passed +
//     slack. dropped is sluice_replay_dropped_increments_total (given up
//     on, which may or may not have landed), with a stopped node's last
//     drops read from its log. The slack is the documented over-count, an
//     admission the origin made for a caller that gave up (or whose
//     decision failed) and that the node then denied locally: the
//     cancelled requests plus the failed strict decisions; for the patient
//     cells, whose clients never cancel, the decide calls that may have
//     reached Redis; for the near namespace, where nothing is denied (its
//     denials must be 0), none. Where the Redis was killed, only the upper
//     bound is checked, and the loss is logged;
//  4. every cell read, all along, holds a total equal to the sum of its
//     writers' shares (the grow-only counter's invariant).
//
// The seed (logged; SLUICE_CHAOS_SEED repeats a run) draws the faults, the
// request schedule and the balancing. SLUICE_CHAOS_DURATION sets the length
// of the load (default one round, 45 s; `make chaos` runs 5 minutes).
// docs/benchmarks/consistency.md records the figures.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of load on five processes with faults")
	}
	seed, rounds := chaosSettings(t)
	t.Logf("seed %d (repeat with SLUICE_CHAOS_SEED=%d), %d round(s) of %v mixed + %v kill; load average %s",
		seed, seed, rounds, chaosMixed, chaosKill, loadavg())
	rig := newChaosRig(t)
	var reports []phaseReport
	for round := range rounds {
		for k, kind := range []phaseKind{phaseMixed, phaseKill} {
			p := phaseSpec{kind: kind, name: fmt.Sprintf("chaos-%d-%s", round+1, kind), seed: seed + uint64(2*round+k)}
			reports = append(reports, rig.runPhase(p))
		}
	}
	checkChaos(t, reports)
	for region, c := range rig.cells {
		if broken := c.brokenCells(); len(broken) > 0 {
			t.Errorf("region %s: %d cells whose total is not the sum of their writers' shares (counted twice at the origin), first: %s",
				region, len(broken), broken[0])
		}
	}
}

// The load: 6 × 100 + 4 × 40 requests per second. Windows of 5 s make
// most Redis outages (up to 3 s, and the breaker's 3 s before it probes
// again) end before the cells they hit expire at the node, so that few
// increments are dropped and the origin check stays tight; every phase
// still crosses several window boundaries, some during outages.
const (
	chaosWindow    = 5 * time.Second
	chaosLimit     = 100
	chaosPatient   = 6 // identifiers at chaosPatientX × the limit, modelled
	chaosPatientX  = 5
	chaosImpatient = 4 // over and near identifiers each, cancelled after 1-8 ms
	// chaosPatientPrefix starts the patient identifiers, which no client
	// cancels: the client knows how many of their requests passed.
	chaosPatientPrefix = "user-"
	// chaosMixed and chaosKill are the load of one round's phases, whole
	// windows.
	chaosMixed = 25 * time.Second
	chaosKill  = 20 * time.Second
)

// chaosSettings returns the seed (SLUICE_CHAOS_SEED, else random) and the
// number of rounds SLUICE_CHAOS_DURATION asks for (at least one).
func chaosSettings(t *testing.T) (seed uint64, rounds int) {
	t.Helper()
	seed = rand.Uint64() % 1_000_000
	if s := os.Getenv("SLUICE_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SLUICE_CHAOS_SEED=%q: %v", s, err)
		}
	}
	rounds = 1
	if s := os.Getenv("SLUICE_CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SLUICE_CHAOS_DURATION=%q: %v", s, err)
		}
		rounds = max(1, int(d/(chaosMixed+chaosKill)))
	}
	return seed, rounds
}

// chaosRig is the deployment under test and its faults.
type chaosRig struct {
	t          *testing.T
	ws         string
	redisA     *testenv.RedisServer
	redisProxy *testenv.Proxy // region a's nodes reach redisA through it
	mysqlProxy *testenv.Proxy // every node reaches MariaDB through it
	cells      map[string]*cellCollector
	lb         *balancer
	retired    []retiredNode // nodes stopped by a restart
}

// newChaosRig starts both Redis servers, the proxies, the collectors of
// cells and the five nodes.
func newChaosRig(t *testing.T) *chaosRig {
	dc, err := driver.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	r := &chaosRig{t: t, ws: fmt.Sprintf("e2e-chaos-%d", time.Now().UnixNano()), lb: &balancer{}}
	r.redisA = testenv.StartRedis(t)
	redisB := testenv.StartRedis(t)
	r.redisProxy = testenv.NewProxy(t, r.redisA.Addr)
	r.mysqlProxy = testenv.NewProxy(t, dc.Addr)
	dc.Addr = r.mysqlProxy.Addr()
	r.cells = map[string]*cellCollector{
		"a": startCellCollector(t, r.redisA.Addr),
		"b": startCellCollector(t, redisB.Addr),
	}
	common := []string{"--mysql-dsn", dc.FormatDSN(), "--root-key", rk + ":" + r.ws,
		"--global-interval", "100ms", "--denial-min-window", "1s"}
	for _, region := range []string{"a", "b"} {
		url, count := "redis://"+r.redisProxy.Addr()+"/0", 3
		if region == "b" {
			url, count = "redis://"+redisB.Addr+"/0", 2
		}
		for i := range count {
			args := append([]string{"--region", region, "--redis-url", url}, common...)
			name := region + strconv.Itoa(i+1)
			r.lb.add(&chaosNode{node: start(t, nil, args...), name: name, region: region, args: args})
		}
	}
	return r
}

// phaseKind is what a phase does to region a's Redis.
type phaseKind string

const (
	phaseMixed phaseKind = "mixed" // latency, resets, SIGSTOP
	phaseKill  phaseKind = "kill"  // one SIGKILL and a restart
)

// phaseSpec is one phase: its faults, its name, its seed.
type phaseSpec struct {
	kind phaseKind
	name string
	seed uint64
}

func (p phaseSpec) run() time.Duration {
	if p.kind == phaseKill {
		return chaosKill
	}
	return chaosMixed
}

// namespaces are the phase's namespaces. A kill phase has two sets: the
// load moves to the second once the killed Redis is back, so that the
// second's cells never lived in the Redis that was killed and are checked
// exactly.
func (p phaseSpec) namespaces() []chaosNamespaces {
	set := func(name string) chaosNamespaces { return chaosNamespaces{main: name, near: name + "-near"} }
	if p.kind == phaseKill {
		return []chaosNamespaces{set(p.name + "-before"), set(p.name + "-after")}
	}
	return []chaosNamespaces{set(p.name)}
}

// runPhase loads the rig for p's length from a window boundary while its
// faults run, then lets it settle and measures it.
func (r *chaosRig) runPhase(p phaseSpec) phaseReport {
	t := r.t
	t.Helper()
	ms := chaosWindow.Milliseconds()
	begin := time.UnixMilli((time.Now().Add(300*time.Millisecond).UnixMilli()/ms + 1) * ms)
	before := r.snapshot()
	load := startChaosLoad(r.lb, p.namespaces(), p.seed, begin, p.run())
	faults := r.planFaults(p, rand.New(rand.NewPCG(p.seed, 1)), load)
	t.Logf("phase %s (seed %d): %d faults", p.name, p.seed, len(faults)/2)
	r.runFaults(begin, faults)
	out := load.wait()
	r.settle()
	after := r.snapshot()
	rep := phaseReport{spec: p, load: out}
	rep.engine, rep.model = compare(out.patient, chaosLimit, chaosWindow, begin, int(p.run()/chaosWindow))
	for _, region := range []string{"a", "b"} {
		for i, set := range p.namespaces() {
			for _, ns := range []string{set.main, set.near} {
				where := regionNS{region, ns}
				rep.regions = append(rep.regions, regionReport{
					regionNS:      where,
					near:          ns == set.near,
					exact:         region == "b" || p.kind != phaseKill || i > 0,
					tally:         after.tally(region, ns).minus(before.tally(region, "")),
					origin:        r.cells[region].total(r.ws, ns, ""),
					patientOrigin: r.cells[region].total(r.ws, ns, chaosPatientPrefix),
					patientPassed: out.patientPassed[where],
				})
			}
		}
	}
	rep.log(t)
	return rep
}

// logDrops sums the increments a JSON log reports dropped, by
// dropReasons: the limiter's messages "sluice: increments dropped; not
// replayed to the origin" (with a reason) and "sluice: origin unreachable
// at close; increments not replayed". A stopped node's drops after its
// last scrape are read from its log.
func logDrops(log string) (dropped [3]float64) {
	for line := range strings.SplitSeq(log, "\n") {
		switch {
		case strings.Contains(line, `"msg":"sluice: increments dropped; not replayed to the origin"`):
			for i, reason := range dropReasons {
				if strings.Contains(line, `"reason":"`+reason+`"`) {
					dropped[i] += jsonNumber(line, "increments")
				}
			}
		case strings.Contains(line, `"msg":"sluice: origin unreachable at close; increments not replayed"`):
			dropped[2] += jsonNumber(line, "increments")
		}
	}
	return dropped
}

// jsonNumber returns the number of the first "key": in a JSON line, 0 when
// there is none.
func jsonNumber(line, key string) float64 {
	_, rest, ok := strings.Cut(line, `"`+key+`":`)
	if !ok {
		return 0
	}
	end := strings.IndexAny(rest, ",}")
	if end < 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(rest[:end], 64)
	return v
}
