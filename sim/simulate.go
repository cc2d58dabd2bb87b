package sim

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	globalmemory "github.com/sluicehq/sluice/global/memory"
	"github.com/sluicehq/sluice/internal/drive"
	originmemory "github.com/sluicehq/sluice/origin/memory"
)

// simulate runs the deployment of s (defaults applied, valid) on the
// requests next returns, in ascending time from start (a window boundary),
// against the exact model, and returns the figures. Seed drives the lossy
// calls. The caller fills in the band.
func simulate(s Scenario, seed uint64, start int64, ids []identity, next func() (event, bool, error)) (Result, error) {
	r, err := deploy(s, seed, start, ids)
	if err != nil {
		return Result{}, err
	}
	defer r.close()
	ctx := context.Background()
	r.warmUp(ctx)
	if err := r.drive(ctx, next); err != nil {
		return Result{}, err
	}
	return r.result(), nil
}

// run is one simulation under way: the deployment of a scenario, every
// node a real limiter on one virtual clock; the schedule of what happens
// to it besides the requests; and the tally of the decisions.
type run struct {
	s     Scenario // defaults applied
	seed  uint64
	start int64 // Unix ms, the first window's start
	ids   []identity

	clock   *vclock
	never   chan time.Time // nothing is ever sent: the run drives replay and rounds
	nodes   []*node        // region 0's first
	store   *faultyGlobal  // the global store the regions share; nil with one region
	latency *latency       // of each replay call
	lb      rerouter       // sends a lost node's requests to a live node

	// What the calls to the origins (per region), to the global store and
	// between the nodes of a cluster counted.
	origins []originCounts
	global  globalCounts
	rpcs    atomic.Int64
	cells   int64      // the most cells one node held at a replay round
	leaders leaderHeap // the most a leader kept between its rounds
	served  *served    // the (node, identity, window) triples requests reached

	// What comes next besides the requests, in Unix ms.
	changes    []change // of nodes, in time order
	nextReplay int64
	// roundGaps draws the time from a node's global round to its next:
	// the interval ± 20%, as a real node's loop jitters it. dueRound is
	// the node whose global round falls due first.
	roundGaps *rand.Rand
	dueRound  *node

	tally tally
}

// deploy starts the deployment of s for a run from start: the global store
// if there are several regions, then region after region its origin (a
// memory store, or the cluster origin on each node) and its nodes, with
// the faults of s scheduled. The virtual clock reads start. On an error,
// the nodes started so far are closed.
func deploy(s Scenario, seed uint64, start int64, ids []identity) (*run, error) {
	r := &run{
		s: s, seed: seed, start: start, ids: ids,
		clock:   &vclock{},
		never:   make(chan time.Time),
		nodes:   make([]*node, 0, s.Regions*s.Nodes),
		latency: newLatency(s, seed),
		lb:      rerouter{rng: rand.New(rand.NewPCG(seed, 0x4e7a11))},
		origins: make([]originCounts, s.Regions),
		served:  newServed(len(ids), s.Regions*s.Nodes),
		changes: scheduleChanges(s, start),
		tally:   newTally(s, start, len(ids)),

		nextReplay: start,
		roundGaps:  rand.New(rand.NewPCG(seed, 0x6a77e5)),
	}
	r.clock.set(start)
	originDown, globalDown := scheduleOutages(s, start)
	if s.Regions > 1 {
		r.store = &faultyGlobal{Store: globalmemory.New(), clock: r.clock, down: globalDown, n: &r.global,
			latency: s.GlobalLatency.Milliseconds(),
			loss:    newLossy(s.GlobalLoss, seed, 0x910ba1)}
	}
	for i := range s.Regions {
		if err := r.startRegion(i, originDown[i]); err != nil {
			closeAll(r.nodes)
			return nil, err
		}
	}
	return r, nil
}

// startRegion starts the nodes of region i, on an origin down during down
// and losing the scenario's share of the calls, and in cluster mode makes
// them the members of one ring.
func (r *run) startRegion(i int, down outages) error {
	var store *originmemory.Store
	var cr *clusterRegion
	if r.s.Origin == OriginCluster {
		cr = &clusterRegion{net: newPeerNet(), clock: r.clock, never: r.never, rpcs: &r.rpcs}
	} else {
		store = originmemory.New(r.clock.now)
	}
	loss := newLossy(r.s.OriginLoss, r.seed, 0x0121a1+uint64(i))
	for range r.s.Nodes {
		n := &node{region: i, alive: true, id: fmt.Sprintf("node-%d", len(r.nodes)), cluster: cr}
		if r.s.ReplayLatency > 0 {
			n.gate = newGate()
		}
		n.fo = &faultyOrigin{clock: r.clock, down: down, n: &r.origins[i], loss: loss, gate: n.gate}
		if store != nil {
			n.fo.Origin, n.fo.region = store, store
		}
		n.cfg, n.drive = r.nodeConfig(i, n.fo)
		if err := n.start(); err != nil {
			return err
		}
		r.nodes = append(r.nodes, n)
	}
	setMembers(r.region(i))
	return nil
}

// nodeConfig returns the configuration of a node of region i on origin o:
// every clock is the virtual one, no timer ticks on its own (the run
// drives replay and global rounds) and no wall-clock deadline decides.
func (r *run) nodeConfig(i int, o *faultyOrigin) (sluice.Config, drive.Options) {
	cfg := sluice.Config{
		Region:          fmt.Sprintf("region-%d", i),
		Origin:          o.asOrigin(),
		Clock:           r.clock.now,
		ReplayInterval:  r.s.ReplayInterval,
		OriginMargin:    r.s.OriginMargin,
		OriginTimeout:   time.Minute, // the memory origin answers at once; no wall-clock deadline may decide
		ReplayTimeout:   time.Minute,
		FlushTimeout:    10 * time.Millisecond,
		JanitorInterval: 24 * time.Hour, // no sweep on a wall-clock timer during a run
		Observer:        &r.leaders,
	}
	if r.store != nil {
		cfg.Global = &sluice.GlobalConfig{Store: r.store, Interval: r.s.GlobalInterval, Timeout: time.Minute}
	}
	return cfg, drive.Options{ReplayTicks: r.never, GlobalTicks: r.never}
}

// region returns the nodes of region i.
func (r *run) region(i int) []*node { return r.nodes[i*r.s.Nodes : (i+1)*r.s.Nodes] }

// warmUp runs two global rounds before the first window if there are
// several regions, so that the deployment is running already: every region
// has announced itself and learnt how many regions there are. Then each
// node's rounds take their own course: its first falls at a random point
// of the first interval, as the rounds of nodes started at different times
// do.
func (r *run) warmUp(ctx context.Context) {
	if r.store == nil {
		return
	}
	gi := r.s.GlobalInterval.Milliseconds()
	r.globalRound(ctx, r.start-2*gi)
	r.globalRound(ctx, r.start-gi)
	for _, n := range r.nodes {
		n.nextRound = r.start + r.roundGaps.Int64N(gi/drive.RoundsPerInterval)
	}
	r.dueRound = r.firstRound()
}

// close lands the replays still in flight and closes every node, which
// replays what it holds. It runs after the figures are taken: none of
// these calls counts.
func (r *run) close() {
	for _, n := range r.nodes {
		n.settle(r.clock.milli())
	}
	closeAll(r.nodes)
}

// drive is the event loop: it takes the requests next returns one by one
// and, before each, runs what falls due up to its instant, then serves it.
// It stops at the end of the requests or at the first error.
func (r *run) drive(ctx context.Context, next func() (event, bool, error)) error {
	for {
		ev, ok, err := next()
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if err := r.advance(ctx, ev.ms); err != nil {
			return err
		}
		if err := r.serve(ctx, ev); err != nil {
			return err
		}
	}
}

// advance runs, in time order, every event other than a request that falls
// due up to Unix ms to, setting the clock to each: a replay call landing, a
// change of a node, a replay round, a global round. Of events due at the
// same instant, one of an earlier kind in this list runs first.
func (r *run) advance(ctx context.Context, to int64) error {
	for {
		at, lands := r.nextDue()
		if at > to {
			return nil
		}
		r.clock.set(at)
		switch {
		case lands != nil && lands.due == at:
			lands.land(at, r.latency)
		case len(r.changes) > 0 && r.changes[0].at == at:
			c := r.changes[0]
			r.changes = r.changes[1:]
			if err := c.apply(r.nodes, r.s.Nodes); err != nil {
				return err
			}
		case at == r.nextReplay:
			r.replayRound(at)
			r.nextReplay += r.s.ReplayInterval.Milliseconds()
		default:
			r.nodeRound(ctx, at)
		}
	}
}

// nextDue returns when the next event other than a request falls due, and
// the node whose replay call lands first (the lowest index among equals),
// or nil if none is in flight.
func (r *run) nextDue() (int64, *node) {
	at := r.nextReplay
	if r.store != nil {
		at = min(at, r.dueRound.nextRound)
	}
	if len(r.changes) > 0 {
		at = min(at, r.changes[0].at)
	}
	var lands *node
	for _, n := range r.nodes {
		if n.gate == nil {
			break // no replay latency: no call is ever in flight
		}
		if n.inFlight && (lands == nil || n.due < lands.due) {
			lands = n
		}
	}
	if lands != nil {
		at = min(at, lands.due)
	}
	return at, lands
}

// replayRound starts a replay round on every live node at Unix ms at (with
// a replay latency, its call lands later), then runs a re-homing pass in
// every region (cluster mode).
func (r *run) replayRound(at int64) {
	for _, n := range r.nodes {
		if n.alive {
			r.cells = max(r.cells, n.h.Cells())
			n.flush(at, r.latency)
		}
	}
	for i := range r.s.Regions {
		rehome(r.region(i))
	}
}

// globalRound runs a global round on every live node at Unix ms at, node
// after node (the warm-up's rounds). A failed round is part of the
// scenario.
func (r *run) globalRound(ctx context.Context, at int64) {
	r.clock.set(at)
	for _, n := range r.nodes {
		if n.alive {
			_ = n.h.SyncGlobal(ctx)
		}
	}
}

// firstRound returns the node whose global round falls due first (the
// lowest index among equals).
func (r *run) firstRound() *node {
	next := r.nodes[0]
	for _, n := range r.nodes[1:] {
		if n.nextRound < next.nextRound {
			next = n
		}
	}
	return next
}

// nodeRound runs the global round of the node due at Unix ms at, if it is
// live (a lost node's rounds keep their course, for the node that takes
// its place), and sets its next round the interval ± 20% later. A failed
// round is part of the scenario.
func (r *run) nodeRound(ctx context.Context, at int64) {
	n := r.dueRound
	if n.alive {
		_ = n.h.SyncGlobal(ctx)
	}
	gi := r.s.GlobalInterval.Milliseconds() / drive.RoundsPerInterval
	n.nextRound = at + gi - gi/5 + r.roundGaps.Int64N(2*gi/5+1)
	r.dueRound = r.firstRound()
}

// serve sets the clock to the request ev and has it decided by its node
// (or, that node lost, a live node of its region) and by the model, and
// tallies both decisions.
func (r *run) serve(ctx context.Context, ev event) error {
	r.clock.set(ev.ms)
	i := r.lb.live(r.nodes, ev.node, r.s.Nodes)
	r.served.see(ev.id, i, ev.ms/r.s.Window.Milliseconds())
	n := r.nodes[i]
	n.requests++
	id := r.ids[ev.id]
	res, err := n.l.Ratelimit(ctx, sluice.Request{
		Namespace: id.namespace, Identifier: id.identifier,
		Limit: r.s.Limit, Duration: r.s.Window, Cost: ev.cost, Time: time.UnixMilli(ev.ms),
	})
	if err != nil {
		return fmt.Errorf("sim: %s: request at %d ms: %w", r.s.Name, ev.ms-r.start, err)
	}
	series := i // one series per node with one region, per region otherwise
	if r.s.Regions > 1 {
		series = n.region
	}
	r.tally.record(ev, res.Success, series, n.region)
	return nil
}

// tally counts what the requests of a run got from the deployment and
// from the exact model, per identity and per fixed window.
type tally struct {
	start, d int64 // Unix ms of the first window's start; the window in ms
	windows  int
	limit    int64
	model    *model
	// admitted and reference hold what the deployment and the model
	// admitted of each identity per window: identity i's windows from
	// i × windows.
	admitted, reference []int64
	// got and refGot hold each identity's admissions, for its busiest
	// spans; nil in a run of one window, where every admission lies
	// within one span and the busiest span is the window's total.
	got, refGot [][]admission
	series      [][]int64 // admitted per window by each node (one region) or region
	refSeries   []int64   // admitted per window by the model
	denials     *denialClock
	requests    int64
}

// newTally returns an empty tally for a run of s from start with ids
// identities.
func newTally(s Scenario, start int64, ids int) tally {
	d := s.Window.Milliseconds()
	t := tally{
		start: start, d: d, windows: s.Windows, limit: s.Limit, model: newModel(d, start, ids, s.Windows),
		admitted:  make([]int64, ids*s.Windows),
		reference: make([]int64, ids*s.Windows),
		series:    make([][]int64, len(seriesNames(s))),
		refSeries: make([]int64, s.Windows),
		denials:   newDenialClock(s.Regions, ids, s.Windows),
	}
	if s.Windows > 1 {
		t.got, t.refGot = make([][]admission, ids), make([][]admission, ids)
	}
	for i := range t.series {
		t.series[i] = make([]int64, s.Windows)
	}
	return t
}

// record counts the request ev, which the deployment admitted or denied
// (on a node of region, whose admissions go to series), and has the model
// decide it.
func (t *tally) record(ev event, admitted bool, series, region int) {
	t.requests++
	w := (ev.ms - t.start) / t.d
	at := ev.id*t.windows + int(w)
	if admitted {
		t.admitted[at] += ev.cost
		if t.got != nil {
			t.got[ev.id] = append(t.got[ev.id], admission{ev.ms, ev.cost})
		}
		t.series[series][w] += ev.cost
	} else {
		t.denials.denied(ev.id, w, region, ev.ms)
	}
	if t.model.admit(ev.id, ev.ms, t.limit, ev.cost) {
		t.reference[at] += ev.cost
		if t.refGot != nil {
			t.refGot[ev.id] = append(t.refGot[ev.id], admission{ev.ms, ev.cost})
		}
		t.refSeries[w] += ev.cost
	}
}

// busiest returns the most identity id got, from the deployment (ref
// false) or the model, within any span of one window.
func (t *tally) busiest(id int, ref bool) int64 {
	got, counts := t.got, t.admitted
	if ref {
		got, counts = t.refGot, t.reference
	}
	if got == nil { // one window: its total
		return counts[id]
	}
	return busiest(got[id], t.d)
}

// result returns the figures of the run. It reads the stores' counters as
// they stand after the last request: what the nodes replay as they close
// is not part of the run.
func (r *run) result() Result {
	res := r.settings()
	r.tally.compare(&res, r.ids)
	r.countCalls(&res)
	r.countCosts(&res)
	for i, name := range seriesNames(r.s) {
		res.Series = append(res.Series, Series{Name: name, Admitted: r.tally.series[i]})
	}
	if r.s.Regions > 1 {
		res.DenialSpread = r.tally.denials.spread()
	}
	for _, f := range r.s.Faults {
		res.Faults = append(res.Faults, f.span())
	}
	return res
}

// settings returns a Result holding what was run: the scenario's settings,
// the seed, and how many requests there were with the model's admissions
// per window; in band until the caller says otherwise.
func (r *run) settings() Result {
	s := r.s
	res := Result{
		Scenario: s.Name, Description: s.Description,
		Regions: s.Regions, Nodes: s.Nodes, Limit: s.Limit, Window: fmtDuration(s.Window), Windows: s.Windows,
		Load: s.Load, Identifiers: len(r.ids), Skew: s.Skew, Traffic: s.Traffic, Balance: s.Balance,
		ReplayInterval: fmtDuration(s.ReplayInterval), OriginMargin: s.OriginMargin,
		Requests: r.tally.requests, ReferenceSeries: r.tally.refSeries, InBand: true, Seed: r.seed,
		OriginLoss: s.OriginLoss, GlobalLoss: s.GlobalLoss,
	}
	res.Origin.Kind = s.Origin
	if s.Origin == OriginCluster {
		res.FailureDetection = fmtDuration(s.FailureDetection)
	}
	if s.ReplayLatency > 0 {
		res.ReplayLatency = fmtDuration(s.ReplayLatency)
	}
	if s.ReplayJitter > 0 {
		res.ReplayJitter = fmtDuration(s.ReplayJitter)
	}
	if s.Regions > 1 {
		res.GlobalInterval = fmtDuration(s.GlobalInterval)
	}
	if s.GlobalLatency > 0 {
		res.GlobalLatency = fmtDuration(s.GlobalLatency)
	}
	return res
}

// maxIdentities bounds Result.Identities: beyond it, the identities admitted
// most above the model are kept.
const maxIdentities = 100

// compare fills in the figures of res that compare the deployment with the
// model: each identity's (ids, in the tally's order), their totals, the
// over- and under-admission and the worst spans.
func (t *tally) compare(res *Result, ids []identity) {
	var over, under, worst, refWorst int64
	for i := range ids {
		idn := Identity{Identifier: ids[i].identifier}
		if ids[i].namespace != "sim" {
			idn.Namespace = ids[i].namespace
		}
		for w := i * t.windows; w < (i+1)*t.windows; w++ {
			a, ref := t.admitted[w], t.reference[w]
			idn.Admitted += a
			idn.Reference += ref
			over += max(0, a-ref)
			under += max(0, ref-a)
		}
		b := t.busiest(i, false)
		idn.WorstSpan = ratio(b, t.limit)
		if b > worst {
			worst, res.WorstIdentifier = b, idn.Identifier
		}
		refWorst = max(refWorst, t.busiest(i, true))
		res.Admitted += idn.Admitted
		res.Reference += idn.Reference
		res.Identities = append(res.Identities, idn)
	}
	if len(res.Identities) > maxIdentities {
		slices.SortStableFunc(res.Identities, func(a, b Identity) int {
			return cmp.Compare(b.Admitted-b.Reference, a.Admitted-a.Reference)
		})
		res.Identities = res.Identities[:maxIdentities]
	}
	res.DeltaPct = pct(res.Admitted-res.Reference, res.Reference)
	res.OverPct = pct(over, res.Reference)
	res.UnderPct = pct(under, res.Reference)
	res.WorstSpan = ratio(worst, t.limit)
	res.ReferenceWorstSpan = ratio(refWorst, t.limit)
}

// countCalls fills in the calls the nodes made to their origins, to each
// other (cluster mode) and to the global store, each also per request.
func (r *run) countCalls(res *Result) {
	requests := r.tally.requests
	for i := range r.origins {
		c := &r.origins[i]
		res.Origin.Loads += c.loads.Load()
		res.Origin.Applies += c.applies.Load()
		res.Origin.Decides += c.decides.Load()
		res.Origin.Failed += c.failed.Load()
	}
	res.Origin.PerRequest = ratio(res.Origin.Loads+res.Origin.Applies+res.Origin.Decides, requests)
	if r.s.Origin == OriginCluster {
		res.Origin.RPCs = r.rpcs.Load()
		res.Origin.RPCsPerRequest = ratio(res.Origin.RPCs, requests)
	}
	g := &r.global
	res.Global = GlobalOps{
		Calls: g.calls.Load(), Failed: g.failed.Load(),
		PublishedRows: g.published.Load(), DenialRows: g.denials.Load(), Announcements: g.announced.Load(),
	}
	res.Global.RowsPerRequest = ratio(res.Global.PublishedRows+res.Global.DenialRows, requests)
}

// countCosts fills in res.Costs from the calls counted and the cells held;
// res's requests, OverPct and calls must be filled in first.
func (r *run) countCosts(res *Result) {
	seconds := float64(r.s.Duration()) / float64(time.Second)
	perSecond := func(n int64) float64 { return round(float64(n)/seconds, 3) }
	c := &res.Costs
	if r.s.Origin != OriginCluster {
		var load, apply, decide, region, bytes, keys int64
		for i := range r.origins {
			l, a, d, g := r.origins[i].redis.commands()
			load, apply, decide, region = load+l, apply+a, decide+d, region+g
			bytes += r.origins[i].redis.bytes.Load()
			keys += r.origins[i].redis.keysWritten()
		}
		commands := load + apply + decide + region
		c.RedisCallsPerRequest = ratio(commands, res.Requests)
		c.RedisCallsByCall = RedisSplit{Load: ratio(load, res.Requests), Apply: ratio(apply, res.Requests),
			Decide: ratio(decide, res.Requests), Global: ratio(region, res.Requests)}
		c.RedisCallsPerSecond = perSecond(commands)
		c.RedisKeysWrittenPerRequest = ratio(keys, res.Requests)
		c.RedisFloorCallsPerRequest = ratio(2*r.served.pairs, res.Requests)
		c.OriginBytesPerNodePerSecond = round(float64(bytes)/seconds/float64(r.s.Regions*r.s.Nodes), 1)
	}
	c.PeerCallsPerRequest = res.Origin.RPCsPerRequest
	c.MySQLRowsPerSecond = perSecond(r.global.rows.Load())
	c.MySQLStatementsPerSecond = perSecond(r.global.statements.Load())
	c.CellsPerNode = r.cells
	c.LeaderHeapBytes = r.leaders.most.Load()
	c.HeapBytesPerNode = r.cells*(cellHeapBytes+r.identityBytes()) + c.LeaderHeapBytes
	c.OverAdmission, c.UnderAdmission = res.OverPct, res.UnderPct
	c.BusiestNodeLoad = r.busiestNodeLoad()
	c.Identities = len(r.ids)
	c.MySQLRowsReadPerSecond = perSecond(r.global.rowsRead.Load())
}

// busiestNodeLoad returns the most requests one node served over the mean
// of its region's nodes, the highest of the regions that served any: 1
// when a region's load balancer spreads its requests evenly.
func (r *run) busiestNodeLoad() float64 {
	var most float64
	for i := range r.s.Regions {
		var sum, top int64
		for _, n := range r.region(i) {
			sum += n.requests
			top = max(top, n.requests)
		}
		if sum > 0 {
			most = max(most, float64(top)*float64(r.s.Nodes)/float64(sum))
		}
	}
	return round(most, 3)
}

// identityBytes returns the mean bytes of an identity's strings, which a
// cell holds.
func (r *run) identityBytes() int64 {
	if len(r.ids) == 0 {
		return 0
	}
	var n int
	for _, id := range r.ids {
		n += len(id.namespace) + len(id.identifier)
	}
	return int64(n / len(r.ids))
}
