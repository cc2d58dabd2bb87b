// Package sim runs Sluice's real engine in virtual time and measures how far
// a distributed deployment strays from the exact single-node model.
//
// Every simulated node is a real *sluice.Limiter. The nodes of a region
// share an in-process regional origin (origin/memory, standing in for
// Redis) and the regions share an in-process global store (global/memory,
// standing in for MySQL). All of them read one virtual clock. The simulator
// generates the requests of a [Scenario] from a seeded random source, sends
// each to a node, and drives replay (a flush every replay interval)
// and the global layer (a round every global interval) itself, in
// a fixed order, so that a run is a deterministic function of its scenario
// and seed. The same requests, merged in time order, go through an exact
// sliding-window model (the decision rule of docs/decisions.md on
// integers); [Result] compares the two.
//
// A region's nodes converge either through a shared store (origin/memory,
// standing in for Redis) or in cluster mode (origin/cluster, the real
// cluster origin: each identity's count lives on its owner node, reached
// over an in-process peer network with the real signed RPC, breakers and
// re-homing; membership is modelled: the ring changes at given times).
//
// Faults are scheduled in virtual time: an origin outage (every origin call
// fails with origin.ErrUnavailable), a global outage (every global call
// fails with global.ErrUnavailable), a node restart (the limiter is
// closed and a fresh one takes its place on the same origin) and a node
// loss (the node dies with what it had not replayed and, in cluster mode,
// the counts it owned; the others drop it from their ring after the
// failure detection delay; a fresh node may join in its place later). A
// scenario may also lose a share of the calls at random and delay replays
// (a replay latency in virtual time, with random jitter).
//
// [Builtin] holds the scenarios of docs/accuracy.md, each with the band of
// over-admission it is expected to stay in; [Parse] reads a scenario from
// YAML, [ParseTrace] a user's request log, which [RunTrace] replays through
// a deployment of the user's choice. [Report] writes report.md,
// results.json and one SVG chart per result.
package sim

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Traffic says which nodes receive the requests of a scenario.
type Traffic string

const (
	// TrafficEven sends every request to a node picked at random among all
	// nodes of all regions.
	TrafficEven Traffic = "even"
	// TrafficOneRegion sends every request to a node picked at random among
	// the nodes of the first region only.
	TrafficOneRegion Traffic = "one-region"
)

// Balance says how a region's load balancer picks the node of a request.
type Balance string

const (
	// BalanceRandom sends each request to a node of its region picked at
	// random (round robin and least-requests balancers spread the same
	// way).
	BalanceRandom Balance = "random"
	// BalanceHash sends every request of an identity to the node of its
	// region that the identity hashes to, as a ring-hash load balancer
	// (Envoy's, say) keyed by the identity does.
	BalanceHash Balance = "hash"
)

// OriginKind says how the nodes of a region converge.
type OriginKind string

const (
	// OriginShared gives the nodes of a region one shared store
	// (origin/memory standing in for Redis).
	OriginShared OriginKind = "shared"
	// OriginCluster runs each region in cluster mode (origin/cluster): each
	// identity's count lives on its owner node.
	OriginCluster OriginKind = "cluster"
)

// FaultKind names a scheduled fault.
type FaultKind string

const (
	// OriginOutage makes every call to the regional origin of the chosen
	// regions fail with origin.ErrUnavailable between At and Until.
	OriginOutage FaultKind = "origin-outage"
	// GlobalOutage makes every call to the global store fail with
	// global.ErrUnavailable between At and Until.
	GlobalOutage FaultKind = "global-outage"
	// Restart closes one node at At (flushing what it has not replayed) and
	// starts a fresh limiter on the same origin in its place.
	Restart FaultKind = "restart"
	// NodeLoss kills one node at At, like SIGKILL: what it had not
	// replayed is lost, and in cluster mode so are the counts it owned.
	// Its traffic goes to the other nodes of its region at once (a load
	// balancer's health check); in cluster mode they drop it from their
	// ring FailureDetection later, and until then call it in vain, then
	// its runner-up, once their breaker for it opens. With Until, a fresh
	// node joins in its place at Until (and the ring at once).
	NodeLoss FaultKind = "node-loss"
)

// Fault is one scheduled fault. Times are offsets from the start of the run.
type Fault struct {
	Kind FaultKind
	// At is when the fault starts (an outage, a node loss) or happens (a
	// restart).
	At time.Duration
	// Until ends an outage (calls fail in [At, Until)) or a node loss (a
	// fresh node joins; 0: never).
	Until time.Duration
	// Regions are the indexes of the regions whose origin fails in an
	// origin outage; empty means every region.
	Regions []int
	// Node is the index of the restarted or lost node, counted over all
	// regions in order (region 0's nodes first).
	Node int
}

// Band is the range a scenario's over-admission percentage is expected to
// stay in (see [Result.OverPct]), inclusive.
type Band struct {
	MinOverPct float64
	MaxOverPct float64
}

// Contains reports whether pct lies in the band.
func (b Band) Contains(pct float64) bool { return pct >= b.MinOverPct && pct <= b.MaxOverPct }

// String returns the band as "min% to max%", as the reports print it.
func (b Band) String() string {
	return fmt.Sprintf("%s%% to %s%%", fmtPct(b.MinOverPct), fmtPct(b.MaxOverPct))
}

// Scenario describes one simulated deployment and its traffic.
type Scenario struct {
	// Name identifies the scenario: lower-case letters, digits and dashes.
	// It names the scenario's chart, NAME.svg.
	Name        string
	Description string
	// Regions is the number of regions; Nodes the number of nodes in each.
	Regions int
	Nodes   int
	// Limit is every identifier's limit per Window.
	Limit int64
	// Window is the rate-limit window; the run lasts Windows windows, from a
	// window boundary.
	Window  time.Duration
	Windows int
	// Load is the rate of requests of each identifier, as a multiple of
	// its limit per window (2 sends twice as many requests as the limit
	// admits). Requests arrive at random (exponential gaps), cost 1 each.
	Load float64
	// Identifiers is the number of identifiers sharing the traffic; each
	// has its own counter and limit.
	Identifiers int
	// Skew, when set (above 1), picks each request's identifier from a
	// Zipf distribution of exponent Skew over the identifiers instead of
	// uniformly: identifier 0 is the most requested, and few identifiers
	// take most of the traffic, as real tenants and users do. The total
	// rate is unchanged (Load × Limit per window for each identifier, on
	// average). 0: uniform.
	Skew float64
	// Traffic says which nodes receive the requests (default even).
	Traffic Traffic
	// Balance says how a region's load balancer picks the node of a
	// request (default random).
	Balance Balance
	// Origin says how the nodes of a region converge (default shared).
	Origin OriginKind
	// FailureDetection is how long, in cluster mode, the nodes of a region
	// take to drop a lost node from their ring (memberlist's failure
	// detection). Default 5s.
	FailureDetection time.Duration
	// ReplayInterval is the virtual time between two replays of every node
	// (a replay round). Default 25ms.
	ReplayInterval time.Duration
	// GlobalInterval is the virtual time between two rounds of the global
	// layer on every node, with more than one region.
	// Default 5s.
	GlobalInterval time.Duration
	// OriginMargin is each node's sluice.Config.OriginMargin: the share of
	// the limit near which the origin decides. Default 0.2, the engine's;
	// a negative value turns it off.
	OriginMargin float64
	// ReplayLatency is how long a replay takes to reach the origin, in
	// virtual time: its increments land that long after the round that
	// sent them (the node counts them as in flight meanwhile, as it does
	// with a real network), and the node's next round waits for it.
	// Default 0: a replay lands at once.
	ReplayLatency time.Duration
	// ReplayJitter adds to each replay's latency a random extra delay, up
	// to ReplayJitter, drawn from the run's seed. It needs ReplayLatency.
	ReplayJitter time.Duration
	// OriginLoss and GlobalLoss are the shares of calls to the regional
	// origins and to the global store that fail (with ErrUnavailable) at
	// random, drawn from the run's seed: a lossy network.
	OriginLoss float64
	GlobalLoss float64
	// GlobalLatency is how long, in virtual time, a write to the global
	// store (counts, denials) takes to become visible to the other regions'
	// reads, like a replication lag: the writer is answered at once.
	// Default 0: at once.
	GlobalLatency time.Duration
	// Faults are scheduled in virtual time.
	Faults []Fault
	// Band is where the over-admission is expected to stay.
	Band Band
}

// Defaults of the zero fields of a [Scenario].
const (
	DefaultReplayInterval = 25 * time.Millisecond
	DefaultGlobalInterval = 5 * time.Second
	DefaultOriginMargin   = 0.2
	// DefaultFailureDetection is about what memberlist took to declare a
	// killed node dead with sluice serve's settings, measured over real
	// processes (5.0 to 5.4 s).
	DefaultFailureDetection = 5 * time.Second
)

// maxRequests bounds the requests of one run, so that a scenario file cannot
// ask for hours of work by mistake: on two cores a run of one region sends
// about 300,000 requests a second of wall time, one of 10 regions of 20
// nodes with a global round every second about 120,000. It is scale-1m's
// full size: 60 million requests, about 8 minutes.
const maxRequests = 60_000_000

// ErrInvalidScenario is returned, wrapped with the reason, for a scenario
// that cannot run.
var ErrInvalidScenario = errors.New("sim: invalid scenario")

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// withDefaults returns s with its zero optional fields set.
func (s Scenario) withDefaults() Scenario {
	if s.Traffic == "" {
		s.Traffic = TrafficEven
	}
	if s.Balance == "" {
		s.Balance = BalanceRandom
	}
	if s.ReplayInterval == 0 {
		s.ReplayInterval = DefaultReplayInterval
	}
	if s.GlobalInterval == 0 {
		s.GlobalInterval = DefaultGlobalInterval
	}
	if s.OriginMargin == 0 {
		s.OriginMargin = DefaultOriginMargin
	}
	if s.Origin == "" {
		s.Origin = OriginShared
	}
	if s.FailureDetection == 0 {
		s.FailureDetection = DefaultFailureDetection
	}
	return s
}

// Duration returns the virtual time a run of s covers.
func (s Scenario) Duration() time.Duration { return time.Duration(s.Windows) * s.Window }

// Validate reports the first field of s that makes it unable to run, as a
// [FieldError] wrapping [ErrInvalidScenario]. Zero optional fields are valid.
func (s Scenario) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case !namePattern.MatchString(s.Name):
		return bad("name", "%q is not lower-case letters, digits and dashes", s.Name)
	case s.Regions < 1:
		return bad("regions", "%d is below 1", s.Regions)
	case s.Nodes < 1:
		return bad("nodes", "%d is below 1", s.Nodes)
	case s.Limit < 1:
		return bad("limit", "%d is below 1", s.Limit)
	case s.Window < time.Millisecond || s.Window%time.Millisecond != 0:
		return bad("window", "%v is not a whole number of milliseconds of at least 1ms", s.Window)
	case s.Windows < 1:
		return bad("windows", "%d is below 1", s.Windows)
	case !(s.Load > 0):
		return bad("load", "%v is not above 0", s.Load)
	case s.Identifiers < 1:
		return bad("identifiers", "%d is below 1", s.Identifiers)
	case s.Skew != 0 && !(s.Skew > 1):
		return bad("skew", "%v is not above 1 (a Zipf exponent; 0 for uniform)", s.Skew)
	case s.Traffic != "" && s.Traffic != TrafficEven && s.Traffic != TrafficOneRegion:
		return bad("traffic", "%q is neither %q nor %q", s.Traffic, TrafficEven, TrafficOneRegion)
	case s.Balance != "" && s.Balance != BalanceRandom && s.Balance != BalanceHash:
		return bad("balance", "%q is neither %q nor %q", s.Balance, BalanceRandom, BalanceHash)
	case s.ReplayInterval < 0 || s.ReplayInterval%time.Millisecond != 0:
		return bad("replay_interval", "%v is not a whole, non-negative number of milliseconds", s.ReplayInterval)
	case s.GlobalInterval < 0 || s.GlobalInterval%time.Millisecond != 0:
		return bad("global_interval", "%v is not a whole, non-negative number of milliseconds", s.GlobalInterval)
	case s.OriginMargin > 1:
		return bad("origin_margin", "%v is above 1", s.OriginMargin)
	case s.Origin != "" && s.Origin != OriginShared && s.Origin != OriginCluster:
		return bad("origin", "%q is neither %q nor %q", s.Origin, OriginShared, OriginCluster)
	case s.FailureDetection < 0 || s.FailureDetection%time.Millisecond != 0:
		return bad("failure_detection", "%v is not a whole, non-negative number of milliseconds", s.FailureDetection)
	case s.ReplayLatency < 0 || s.ReplayLatency%time.Millisecond != 0:
		return bad("replay_latency", "%v is not a whole, non-negative number of milliseconds", s.ReplayLatency)
	case s.ReplayJitter < 0 || s.ReplayJitter%time.Millisecond != 0:
		return bad("replay_jitter", "%v is not a whole, non-negative number of milliseconds", s.ReplayJitter)
	case s.ReplayJitter > 0 && s.ReplayLatency == 0:
		return bad("replay_jitter", "jitter needs a replay_latency")
	case !(s.OriginLoss >= 0 && s.OriginLoss < 1):
		return bad("origin_loss", "%v is outside [0, 1)", s.OriginLoss)
	case !(s.GlobalLoss >= 0 && s.GlobalLoss < 1):
		return bad("global_loss", "%v is outside [0, 1)", s.GlobalLoss)
	case s.GlobalLatency < 0 || s.GlobalLatency%time.Millisecond != 0:
		return bad("global_latency", "%v is not a whole, non-negative number of milliseconds", s.GlobalLatency)
	case s.GlobalLatency > 0 && s.Regions < 2:
		return bad("global_latency", "a global store needs at least 2 regions")
	case s.GlobalLoss > 0 && s.Regions < 2:
		return bad("global_loss", "a global store needs at least 2 regions")
	case s.Band.MinOverPct > s.Band.MaxOverPct:
		return bad("band", "min %v is above max %v", s.Band.MinOverPct, s.Band.MaxOverPct)
	}
	if n := s.Load * float64(s.Limit) * float64(s.Windows) * float64(s.Identifiers); n > maxRequests {
		return bad("load", "the run would send about %.0f requests, more than %d", n, maxRequests)
	}
	for i, f := range s.Faults {
		if err := f.validate(s); err != nil {
			return &FieldError{Field: fmt.Sprintf("faults[%d].%s", i, err.Field), Err: err.Err}
		}
		if err := lossesLeaveANode(s, i); err != nil {
			return &FieldError{Field: fmt.Sprintf("faults[%d].%s", i, err.Field), Err: err.Err}
		}
	}
	return nil
}

// lossesLeaveANode checks that fault i, if a node loss, leaves its node's
// region a live node and does not overlap another loss of the same node.
func lossesLeaveANode(s Scenario, i int) *FieldError {
	f := s.Faults[i]
	if f.Kind != NodeLoss {
		return nil
	}
	end := func(g Fault) time.Duration {
		if g.Until == 0 {
			return s.Duration() + 1
		}
		return g.Until
	}
	lost := 0
	for j, g := range s.Faults {
		if g.Kind != NodeLoss || g.Node/s.Nodes != f.Node/s.Nodes || g.At >= end(f) || f.At >= end(g) {
			continue
		}
		if j != i && g.Node == f.Node {
			return &FieldError{Field: "at", Err: fmt.Errorf("node %d is lost already (faults[%d])", f.Node, j)}
		}
		lost++
	}
	if lost >= s.Nodes {
		return &FieldError{Field: "node", Err: fmt.Errorf("region %d would have no node left", f.Node/s.Nodes)}
	}
	return nil
}

func (f Fault) validate(s Scenario) *FieldError {
	bad := func(field, format string, args ...any) *FieldError {
		return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case f.Kind != OriginOutage && f.Kind != GlobalOutage && f.Kind != Restart && f.Kind != NodeLoss:
		return bad("kind", "%q is not %q, %q, %q or %q", f.Kind, OriginOutage, GlobalOutage, Restart, NodeLoss)
	case f.At < 0 || f.At > s.Duration():
		return bad("at", "%v is outside the run (0 to %v)", f.At, s.Duration())
	case f.Kind != Restart && f.Kind != NodeLoss && f.Until <= f.At:
		return bad("until", "%v is not after at (%v)", f.Until, f.At)
	case f.Kind == NodeLoss && f.Until != 0 && f.Until <= f.At:
		return bad("until", "%v is not after at (%v); leave it out for a node that does not come back", f.Until, f.At)
	case (f.Kind == Restart || f.Kind == NodeLoss) && (f.Node < 0 || f.Node >= s.Regions*s.Nodes):
		return bad("node", "%d is not a node (0 to %d)", f.Node, s.Regions*s.Nodes-1)
	case f.Kind == Restart && s.Origin == OriginCluster:
		return bad("kind", "a restart in cluster mode loses the node's counts: use %q with until", NodeLoss)
	case f.Kind == GlobalOutage && s.Regions < 2:
		return bad("kind", "a global outage needs at least 2 regions")
	}
	for j, r := range f.Regions {
		if r < 0 || r >= s.Regions {
			return bad(fmt.Sprintf("regions[%d]", j), "%d is not a region (0 to %d)", r, s.Regions-1)
		}
	}
	return nil
}

// FieldError is an error about one field of a scenario: it names the file and
// line of the field in a scenario file (none for a scenario built in code)
// and matches [ErrInvalidScenario] with errors.Is.
type FieldError struct {
	File  string
	Line  int
	Field string
	Err   error
}

// Error names the file and line when known, the field, and the problem.
func (e *FieldError) Error() string {
	switch {
	case e.File != "" && e.Line > 0:
		return fmt.Sprintf("sim: %s:%d: field %s: %v", e.File, e.Line, e.Field, e.Err)
	case e.File != "":
		return fmt.Sprintf("sim: %s: field %s: %v", e.File, e.Field, e.Err)
	default:
		return fmt.Sprintf("sim: invalid scenario: field %s: %v", e.Field, e.Err)
	}
}

// Unwrap returns [ErrInvalidScenario] and the reason.
func (e *FieldError) Unwrap() []error { return []error{ErrInvalidScenario, e.Err} }
