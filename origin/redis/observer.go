package redis

import (
	"time"

	"github.com/sluicehq/sluice/internal/breaker"
)

// Op names a Redis call of the origin, for metrics labels.
type Op string

// The operations an [Observer] sees.
const (
	// OpLoad is one pipeline of two HMGETs: the totals and imported
	// counts of a counter's current and previous cells.
	OpLoad Op = "load"
	// OpApply is one pipeline of increment scripts: on a Redis Cluster,
	// the part of an Apply that goes to one master.
	OpApply Op = "apply"
	// OpDecide is one script call that decides strict-mode requests
	// atomically.
	OpDecide Op = "decide"
	// OpRegion is one call of the region's global layer (origin.Region):
	// the lease, the nominations' queue, or on a Redis Cluster the part
	// of an import that goes to one master.
	OpRegion Op = "region"
)

// Outcome classifies how a Redis call ended, for metrics labels.
type Outcome string

// The outcomes an [Observer] sees.
const (
	// OutcomeOK: Redis answered every command.
	OutcomeOK Outcome = Outcome(breaker.OK)
	// OutcomeError: Redis answered, but with an error reply that is not an
	// outage (for example WRONGTYPE, or a cell that does not hold an
	// integer). It does not count against the circuit breaker.
	OutcomeError Outcome = Outcome(breaker.Error)
	// OutcomeTimeout: the call's deadline (Config.Timeout or the caller's)
	// passed first. Counts as a failure for the circuit breaker.
	OutcomeTimeout Outcome = Outcome(breaker.Timeout)
	// OutcomeUnavailable: the connection failed (refused, reset, closed) or
	// Redis replied with an outage error (LOADING, READONLY, CLUSTERDOWN,
	// TRYAGAIN, MASTERDOWN, OOM, BUSY, ...). Counts as a failure.
	OutcomeUnavailable Outcome = Outcome(breaker.Unavailable)
	// OutcomeRejected: the circuit breaker refused the call without touching
	// the network. Elapsed is (near) zero.
	OutcomeRejected Outcome = Outcome(breaker.Rejected)
	// OutcomeCanceled: the caller canceled its context. It does not count
	// against the circuit breaker.
	OutcomeCanceled Outcome = Outcome(breaker.Canceled)
)

// Call describes one finished Redis call of the origin.
type Call struct {
	Op      Op
	Outcome Outcome
	// Cells is the number of cells the call read (2 for a load) or wrote
	// (the number of deltas of an apply, or of its part on one master).
	Cells   int
	Elapsed time.Duration
	// Master is the address of the Redis Cluster master the call went to,
	// whose breaker it went through. It is "" on a client of one server,
	// and for a cluster call made before the client knew which master
	// serves which slot.
	Master string
}

// BreakerState is the state of a circuit breaker of the origin.
type BreakerState = breaker.State

// The circuit breaker states.
const (
	// BreakerClosed: calls go to Redis.
	BreakerClosed = breaker.Closed
	// BreakerHalfOpen: a limited number of probe calls go to Redis; success
	// closes the breaker, failure opens it again.
	BreakerHalfOpen = breaker.HalfOpen
	// BreakerOpen: calls fail at once with an error wrapping
	// origin.ErrUnavailable, without touching the network.
	BreakerOpen = breaker.Open
)

// Observer receives the origin's telemetry; the server adapts it to
// Prometheus. Implementations must be safe for concurrent use, fast and
// non-blocking. BreakerChanged is called while a breaker holds its lock: it
// must not call back into the [Origin]. An Observer that also implements
// [MasterObserver] receives the state of each master's breaker too.
type Observer interface {
	// ObserveCall is called once per call that reached a breaker: a Load, a
	// Decide, or an Apply's call to one master (an Apply whose cells live
	// on three masters of a Redis Cluster makes three calls). Calls
	// rejected by validation or by a context that was already done are not
	// observed.
	ObserveCall(c Call)
	// BreakerChanged is called on every change of the state
	// [Origin.BreakerState] reports: the state of the one breaker of a
	// client of one server, or the most severe state of a Redis Cluster's
	// masters' breakers (open while one master's breaker is open).
	BreakerChanged(from, to BreakerState)
}

// MasterObserver is an [Observer] that also receives the state changes of
// the breaker of each master of a Redis Cluster, which open and close on
// that master's failures alone. MasterBreakerChanged is called with the
// same rules as BreakerChanged, and before the BreakerChanged call the same
// change causes, if any.
type MasterObserver interface {
	Observer
	// MasterBreakerChanged is called on every state change of the breaker
	// of the master at address master ("host:port"), and once more, to
	// closed, when the origin drops the breaker of an address that no
	// longer serves the slots it served (after a failover) while it was
	// not closed: a breaker made again for the address starts closed.
	MasterBreakerChanged(master string, from, to BreakerState)
}

// nopObserver is the Observer used when Config.Observer is nil.
type nopObserver struct{}

func (nopObserver) ObserveCall(Call)                 {}
func (nopObserver) BreakerChanged(_, _ BreakerState) {}
