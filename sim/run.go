package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin/cluster"
)

// DefaultSeed is the seed of a run when none is given.
const DefaultSeed uint64 = 1

// Result is what one run of a scenario measured. Every figure is a
// deterministic function of the scenario and the seed; floats are rounded
// to a fixed number of decimals so that their text is stable.
type Result struct {
	Scenario    string  `json:"scenario"`
	Description string  `json:"description"`
	Seed        uint64  `json:"seed"`
	Regions     int     `json:"regions"`
	Nodes       int     `json:"nodes_per_region"`
	Limit       int64   `json:"limit"`
	Window      string  `json:"window"`
	Windows     int     `json:"windows"`
	Load        float64 `json:"load"`
	Identifiers int     `json:"identifiers"`
	Skew        float64 `json:"skew,omitempty"`
	Traffic     Traffic `json:"traffic"`
	Balance     Balance `json:"balance"`
	// FailureDetection is the scenario's, in cluster mode.
	FailureDetection string `json:"failure_detection,omitempty"`
	// ReplayInterval, GlobalInterval and OriginMargin are the scenario's,
	// defaults applied.
	ReplayInterval string  `json:"replay_interval"`
	GlobalInterval string  `json:"global_interval,omitempty"`
	OriginMargin   float64 `json:"origin_margin"`
	OriginLoss     float64 `json:"origin_loss,omitempty"`
	ReplayLatency  string  `json:"replay_latency,omitempty"`
	ReplayJitter   string  `json:"replay_jitter,omitempty"`
	GlobalLoss     float64 `json:"global_loss,omitempty"`
	GlobalLatency  string  `json:"global_latency,omitempty"`

	// Requests is the number of requests sent; Admitted how many the
	// simulated deployment admitted, Reference how many the exact
	// single-node model admitted of the same stream.
	Requests  int64 `json:"requests"`
	Admitted  int64 `json:"admitted"`
	Reference int64 `json:"reference"`
	// DeltaPct is (Admitted - Reference) / Reference, in percent.
	DeltaPct float64 `json:"delta_pct"`
	// OverPct is what the deployment admitted above the reference, summed
	// over every identifier's fixed windows where it admitted more, as a
	// percentage of the reference; UnderPct likewise below it.
	OverPct  float64 `json:"over_pct"`
	UnderPct float64 `json:"under_pct"`
	// WorstSpan is the most one identifier was admitted within any span of
	// one window, as a multiple of its limit; WorstIdentifier is that
	// identifier. ReferenceWorstSpan is the same figure for the model,
	// which can exceed 1 too: the sliding window weights the previous cell
	// as if its admissions were spread evenly.
	WorstSpan          float64 `json:"worst_span"`
	WorstIdentifier    string  `json:"worst_identifier"`
	ReferenceWorstSpan float64 `json:"reference_worst_span"`

	// Faults are the scenario's faults, as run.
	Faults []FaultSpan `json:"faults,omitempty"`

	Origin OriginOps `json:"origin"`
	Global GlobalOps `json:"global"`
	// Costs are the resources the deployment spent; their fields sit at
	// the top level of the JSON.
	Costs

	// Identities holds the figures of each identifier; of the 100 admitted
	// most above the model when there are more.
	Identities []Identity `json:"worst_identities"`
	// Series holds the admissions per fixed window (all identifiers
	// together) of each node (one region) or each region; ReferenceSeries
	// the model's.
	Series          []Series `json:"series"`
	ReferenceSeries []int64  `json:"reference_series"`

	// DenialSpread says how long the other regions went on admitting after
	// one region denied (several regions only).
	DenialSpread *DenialSpread `json:"denial_spread,omitempty"`

	// Band is the scenario's band (none for a trace); InBand reports that
	// OverPct lies in it (always true without a band).
	Band   *Band `json:"band,omitempty"`
	InBand bool  `json:"in_band"`
}

// DenialSpread measures, for every identifier's fixed window that one
// region denied, how long after that first denial each other region that
// got requests of the window later denied it too: the time it took the
// others to stop admitting, through the global layer or their own count.
type DenialSpread struct {
	Samples  int   `json:"samples"` // (window, other region) pairs
	MedianMs int64 `json:"median_ms"`
	MaxMs    int64 `json:"max_ms"`
}

// denialClock records the first denial of each identifier's window per
// region: for the window w of identity id, at[id × windows + w] is 1 + the
// index in first of its regions' first denials (-1 for none), 0 until one
// region denies it.
type denialClock struct {
	regions, windows int
	at               []int32
	first            []int64
}

// newDenialClock returns the clock of a run of regions regions, ids
// identities and windows windows; with one region it records nothing.
func newDenialClock(regions, ids, windows int) *denialClock {
	c := &denialClock{regions: regions, windows: windows}
	if regions > 1 {
		c.at = make([]int32, ids*windows)
	}
	return c
}

func (c *denialClock) denied(id int, w int64, region int, ms int64) {
	if c.regions < 2 {
		return
	}
	i := id*c.windows + int(w)
	if c.at[i] == 0 {
		c.first = append(c.first, slices.Repeat([]int64{-1}, c.regions)...)
		c.at[i] = int32(len(c.first) / c.regions)
	}
	f := c.first[int(c.at[i]-1)*c.regions:][:c.regions]
	if f[region] < 0 {
		f[region] = ms
	}
}

// spread returns the lags of the regions that denied after the first one.
func (c *denialClock) spread() *DenialSpread {
	var lags []int64
	for f := range slices.Chunk(c.first, max(c.regions, 1)) {
		first := slices.IndexFunc(f, func(ms int64) bool { return ms >= 0 })
		for r, ms := range f {
			if ms >= 0 && ms < f[first] || ms >= 0 && ms == f[first] && r < first {
				first = r
			}
		}
		for r, ms := range f {
			if r != first && ms >= 0 {
				lags = append(lags, ms-f[first])
			}
		}
	}
	if len(lags) == 0 {
		return &DenialSpread{}
	}
	slices.Sort(lags)
	return &DenialSpread{Samples: len(lags), MedianMs: lags[len(lags)/2], MaxMs: lags[len(lags)-1]}
}

// FaultSpan is one fault of a run: what failed, and when, in milliseconds
// from the start (an outage covers [AtMs, UntilMs); a restart has no end).
type FaultSpan struct {
	Kind    FaultKind `json:"kind"`
	What    string    `json:"what"`
	AtMs    int64     `json:"at_ms"`
	UntilMs int64     `json:"until_ms,omitempty"`
}

// OriginOps says how the nodes of a region converge and counts the calls
// they made to their regional origins.
type OriginOps struct {
	Kind    OriginKind `json:"kind"`
	Loads   int64      `json:"loads"`   // hydrations and refreshes
	Applies int64      `json:"applies"` // replay calls
	Decides int64      `json:"decides"` // decisions at the origin (strict mode, near the limit)
	Failed  int64      `json:"failed"`  // calls refused by an outage
	// PerRequest is all calls divided by the requests.
	PerRequest float64 `json:"per_request"`
	// RPCs counts the peer RPCs between the nodes (cluster mode): a call
	// for an identity the calling node owns needs none.
	RPCs int64 `json:"rpcs,omitempty"`
	// RPCsPerRequest is RPCs divided by the requests.
	RPCsPerRequest float64 `json:"rpcs_per_request,omitempty"`
}

// GlobalOps counts the calls and rows of the global layer.
type GlobalOps struct {
	Calls         int64 `json:"calls"`
	Failed        int64 `json:"failed"`
	PublishedRows int64 `json:"published_rows"`
	DenialRows    int64 `json:"denial_rows"`
	// Announcements is the announcements of a region (each a row of the
	// regions table), not counted in the rows.
	Announcements int64 `json:"announcements"`
	// RowsPerRequest is the rows written divided by the requests.
	RowsPerRequest float64 `json:"rows_per_request"`
}

// Identity holds the figures of one identifier.
type Identity struct {
	Namespace  string  `json:"namespace,omitempty"` // omitted for the built-in scenarios' "sim"
	Identifier string  `json:"identifier"`
	Admitted   int64   `json:"admitted"`
	Reference  int64   `json:"reference"`
	WorstSpan  float64 `json:"worst_span"`
}

// Series is one node's or region's admissions per fixed window.
type Series struct {
	Name     string  `json:"name"`
	Admitted []int64 `json:"admitted"`
}

// MarshalJSON writes a Band with snake-case names.
func (b Band) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"min_over_pct":%s,"max_over_pct":%s}`, fmtPct(b.MinOverPct), fmtPct(b.MaxOverPct)), nil
}

// node is one simulated process.
type node struct {
	region int
	cfg    sluice.Config
	drive  drive.Options // cfg's driven settings: the run ticks replay and rounds
	l      *sluice.Limiter
	h      drive.Handle  // l's background rounds, which the run drives
	fo     *faultyOrigin // cfg.Origin
	alive  bool          // false once lost, until a fresh node joins

	// In cluster mode: the member id, the incarnation (bumped by each
	// join), the current incarnation's cluster origin (fo's) and what the
	// region's nodes share.
	id      string
	gen     int
	co      *cluster.Origin
	cluster *clusterRegion

	// With a replay latency, a replay round runs on its own goroutine and
	// its origin call waits at gate until the simulator lets it land.
	gate     *gate
	flushed  chan struct{} // closed when the round in flight has returned
	inFlight bool          // a round's origin call is waiting at gate
	due      int64         // when it lands, Unix ms

	nextRound int64 // when its next global round falls due, Unix ms
	requests  int64 // requests it served
}

// flush starts a replay round of n at now. Without a gate the round runs
// at once; with one it runs on its own goroutine until its origin call
// waits at the gate (it lands after a latency drawn from lat) or it returns
// without one.
func (n *node) flush(now int64, lat *latency) {
	if n.gate == nil {
		n.h.Round()
		return
	}
	if n.flushed != nil {
		return // the previous round has not returned: the dispatcher waits for it
	}
	n.gate.on.Store(true)
	done := make(chan struct{})
	n.flushed = done
	go func() {
		defer close(done)
		n.h.Round()
	}()
	n.await(now, lat)
}

// await waits until the round in flight either calls the origin (which
// then waits at the gate, to land after a latency drawn from lat) or
// returns.
func (n *node) await(now int64, lat *latency) {
	select {
	case <-n.gate.arrived:
		n.inFlight, n.due = true, now+lat.next()
	case <-n.flushed:
		n.inFlight, n.flushed = false, nil
		n.gate.on.Store(false)
	}
}

// land lets the origin call of the round in flight go through now, and
// waits for what the round does next.
func (n *node) land(now int64, lat *latency) {
	n.gate.release <- struct{}{}
	n.inFlight = false
	n.await(now, lat)
}

// settle lands every call of the round in flight at once, until it returns.
func (n *node) settle(now int64) {
	for n.flushed != nil {
		if n.inFlight {
			n.land(now, &latency{})
		} else {
			n.await(now, &latency{})
		}
	}
}

// latency draws the latency of each replay call, in virtual ms: the
// scenario's ReplayLatency plus up to ReplayJitter, from its own random
// source so that jitter does not change the requests of a run.
type latency struct {
	base, jitter int64
	rng          *rand.Rand
}

func newLatency(s Scenario, seed uint64) *latency {
	return &latency{base: s.ReplayLatency.Milliseconds(), jitter: s.ReplayJitter.Milliseconds(), rng: rand.New(rand.NewPCG(seed, 0x1a7e))}
}

func (l *latency) next() int64 {
	if l.jitter == 0 {
		return l.base
	}
	return l.base + l.rng.Int64N(l.jitter+1)
}

// Run simulates s with the random source seeded by seed and returns what
// it measured. The same scenario and seed always give the same Result.
func Run(s Scenario, seed uint64) (Result, error) {
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	s = s.withDefaults()
	d := s.Window.Milliseconds()
	start := (1_800_000_000_000 / d) * d // a window boundary in 2027
	end := start + int64(s.Windows)*d
	rng := rand.New(rand.NewPCG(seed, 0x5171ce))
	rate := s.Load * float64(s.Limit) * float64(s.Identifiers) / float64(d) // requests per ms
	pool, regions := s.Regions*s.Nodes, s.Regions
	if s.Traffic == TrafficOneRegion {
		pool, regions = s.Nodes, 1
	}
	ids := make([]identity, s.Identifiers)
	for i := range ids {
		ids[i] = identity{namespace: "sim", identifier: identifier(i)}
	}
	pick := func() int { return rng.IntN(s.Identifiers) }
	if s.Skew > 0 {
		z := rand.NewZipf(rng, s.Skew, 1, uint64(s.Identifiers-1))
		pick = func() int { return int(z.Uint64()) }
	}
	t := float64(start)
	next := func() (event, bool, error) {
		t += rng.ExpFloat64() / rate
		ms := int64(t)
		if ms >= end {
			return event{}, false, nil
		}
		id := pick()
		if s.Balance == BalanceHash {
			return event{ms: ms, id: id, cost: 1, node: rng.IntN(regions)*s.Nodes + hashNode(id, s.Nodes)}, true, nil
		}
		return event{ms: ms, id: id, cost: 1, node: rng.IntN(pool)}, true, nil
	}
	res, err := simulate(s, seed, start, ids, next)
	if err != nil {
		return Result{}, err
	}
	band := s.Band
	res.Band = &band
	res.InBand = band.Contains(res.OverPct)
	return res, nil
}

// hashNode returns the node of a region of nodes that identity id hashes
// to (splitmix64), as a ring-hash load balancer keyed by the identity
// would pick it.
func hashNode(id, nodes int) int {
	z := uint64(id) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return int((z ^ z>>31) % uint64(nodes))
}

// identity is one counter's namespace and identifier.
type identity struct{ namespace, identifier string }

// event is one request: at Unix ms ms, on identity id, sent to node (an
// index over all nodes, region 0's first).
type event struct {
	ms   int64
	id   int
	cost int64
	node int
}

// start creates the node's limiter and, in cluster mode, the cluster
// origin of a new incarnation.
func (n *node) start() error {
	if n.cluster != nil {
		co, err := n.startCluster()
		if err != nil {
			return fmt.Errorf("sim: starting a node of %s: %w", n.cfg.Region, err)
		}
		n.co, n.fo.Origin = co, co
	}
	l, h, err := drive.New[*sluice.Limiter](n.cfg, n.drive)
	if err != nil {
		return fmt.Errorf("sim: starting a node of %s: %w", n.cfg.Region, err)
	}
	n.l, n.h = l, h
	return nil
}

// restart closes the node's limiter, which replays what it has not yet
// (unless the origin is down), and starts a fresh one in its place.
func (n *node) restart() error {
	_ = n.l.Close() // increments lost to an outage are part of the scenario
	return n.start()
}

// kill stops the node as SIGKILL would: what it has not replayed is lost
// (its limiter closes on an origin that refuses every call), and so, in
// cluster mode, is its store, which leaves the network.
func (n *node) kill() {
	n.fo.dead.Store(true)
	if n.co != nil {
		n.cluster.net.down(n.host())
	}
	_ = n.l.Close()
	if n.co != nil {
		_ = n.co.Close()
	}
	n.alive = false
}

// join starts a fresh node in the place of a lost one: a new incarnation
// with an empty store in cluster mode.
func (n *node) join() error {
	n.gen++
	n.fo.dead.Store(false)
	if err := n.start(); err != nil {
		return err
	}
	n.alive = true
	return nil
}

func closeAll(nodes []*node) {
	for _, n := range nodes {
		_ = n.l.Close()
		if n.co != nil {
			_ = n.co.Close()
		}
	}
}

// seriesNames names the series of a run: one per node with one region,
// one per region otherwise.
func seriesNames(s Scenario) []string {
	var names []string
	if s.Regions == 1 {
		for i := range s.Nodes {
			names = append(names, fmt.Sprintf("node-%d", i))
		}
		return names
	}
	for r := range s.Regions {
		names = append(names, fmt.Sprintf("region-%d", r))
	}
	return names
}

func identifier(i int) string { return fmt.Sprintf("id-%03d", i) }

// pct returns n/of in percent, rounded to 3 decimals (0 when of is 0).
func pct(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return round(100*float64(n)/float64(of), 3)
}

// ratio returns n/of rounded to 4 decimals (0 when of is 0).
func ratio(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return round(float64(n)/float64(of), 4)
}

func round(x float64, decimals int) float64 {
	p := math.Pow10(decimals)
	return math.Round(x*p) / p
}

// fmtPct formats a percentage with at most 3 decimals and no trailing zeros.
func fmtPct(x float64) string {
	s := fmt.Sprintf("%.3f", round(x, 3))
	for s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// span describes f for a Result.
func (f Fault) span() FaultSpan {
	sp := FaultSpan{Kind: f.Kind, AtMs: f.At.Milliseconds()}
	switch f.Kind {
	case Restart:
		sp.What = fmt.Sprintf("node-%d restarts", f.Node)
		return sp
	case NodeLoss:
		sp.What = fmt.Sprintf("node-%d lost", f.Node)
		if f.Until > 0 {
			sp.What += ", then replaced"
		}
	case GlobalOutage:
		sp.What = "global store down"
	default:
		sp.What = "origin down"
		if len(f.Regions) > 0 {
			sp.What = fmt.Sprintf("origin of regions %v down", f.Regions)
		}
	}
	sp.UntilMs = f.Until.Milliseconds()
	return sp
}

// fmtDuration formats d as time.Duration does, without zero trailing
// units: 1m rather than 1m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
