package redis

import (
	"time"

	"github.com/sluicehq/sluice/internal/breaker"
)

// Op names a Redis call of the origin, for metrics labels.
type Op string

// The operations an [Observer] sees.
const (
	OpLoad  Op = "load"  // one MGET of a counter's current and previous cell
	OpApply Op = "apply" // one pipeline of increment scripts
	// OpDecide is one script call that decides strict-mode requests
	// atomically.
	OpDecide Op = "decide"
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
	// (the number of deltas of an apply).
	Cells   int
	Elapsed time.Duration
}

// BreakerState is the state of the origin's circuit breaker.
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
// non-blocking. BreakerChanged is called while the breaker holds its lock:
// it must not call back into the [Origin].
type Observer interface {
	// ObserveCall is called once per Load or Apply that reached the breaker
	// (calls rejected by validation or by a context that was already done
	// are not observed).
	ObserveCall(c Call)
	// BreakerChanged is called on every state change of the circuit breaker.
	BreakerChanged(from, to BreakerState)
}

// nopObserver is the Observer used when Config.Observer is nil.
type nopObserver struct{}

func (nopObserver) ObserveCall(Call)                 {}
func (nopObserver) BreakerChanged(_, _ BreakerState) {}
