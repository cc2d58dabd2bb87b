package mysql

import (
	"time"

	"github.com/sluicehq/sluice/internal/breaker"
)

// Op names a call of the store, for metrics labels.
type Op string

// The operations an [Observer] sees, one per method of [global.Store] and
// [global.PullerWithDenials].
const (
	OpPublish         Op = "publish"
	OpAnnounce        Op = "announce"
	OpPull            Op = "pull"
	OpEmitDenials     Op = "emit_denials"
	OpDenials         Op = "denials"
	OpPullWithDenials Op = "pull_with_denials"
	OpCleanup         Op = "cleanup"
)

// Outcome classifies how a call ended, for metrics labels.
type Outcome string

// The outcomes an [Observer] sees.
const (
	// OutcomeOK: every statement of the call succeeded.
	OutcomeOK Outcome = Outcome(breaker.OK)
	// OutcomeError: the server answered with an error that is not an outage
	// (for example a missing table). It does not count against the breaker.
	OutcomeError Outcome = Outcome(breaker.Error)
	// OutcomeTimeout: the call's deadline (Config.Timeout or the caller's)
	// passed first. Counts as a failure for the breaker.
	OutcomeTimeout Outcome = Outcome(breaker.Timeout)
	// OutcomeUnavailable: the connection failed (refused, reset, closed) or
	// the server answered with an outage error (too many connections, lock
	// wait timeout, deadlock after retries, read-only, shutting down). Counts
	// as a failure.
	OutcomeUnavailable Outcome = Outcome(breaker.Unavailable)
	// OutcomeRejected: the circuit breaker refused the call without touching
	// the network.
	OutcomeRejected Outcome = Outcome(breaker.Rejected)
	// OutcomeCanceled: the caller canceled its context. It does not count
	// against the breaker.
	OutcomeCanceled Outcome = Outcome(breaker.Canceled)
)

// Call describes one finished call of the store.
type Call struct {
	Op      Op
	Outcome Outcome
	// Rows is the number of rows the call wrote (Publish: batch rows;
	// Announce: 1; EmitDenials: denial rows sent; Cleanup: rows deleted)
	// or read (Pull: batch rows; Denials: denials; PullWithDenials: both),
	// counted up to the point where it failed.
	Rows int
	// Cells is the number of cells' counts the batch rows of a Publish or
	// a pull carried (a pull: those still active, each (cell, region)
	// once, the highest count read), after merging a Publish's duplicate
	// cells and dropping its counts under 1; 0 for the other calls.
	Cells int
	// Statements is the number of SQL statements the call sent.
	Statements int
	Elapsed    time.Duration
}

// BreakerState is the state of the store's circuit breaker.
type BreakerState = breaker.State

// The circuit breaker states.
const (
	// BreakerClosed: calls go to the database.
	BreakerClosed = breaker.Closed
	// BreakerHalfOpen: a limited number of probe calls go to the database;
	// success closes the breaker, failure opens it again.
	BreakerHalfOpen = breaker.HalfOpen
	// BreakerOpen: calls fail at once with an error wrapping
	// global.ErrUnavailable, without touching the network.
	BreakerOpen = breaker.Open
)

// Observer receives the store's telemetry; the server adapts it to
// Prometheus. Implementations must be safe for concurrent use, fast and
// non-blocking. BreakerChanged is called while the breaker holds its lock:
// it must not call back into the [Store].
type Observer interface {
	// ObserveCall is called once per call that reached the breaker (calls
	// rejected by validation, by a closed store or by a context that was
	// already done are not observed).
	ObserveCall(c Call)
	// BreakerChanged is called on every state change of the breaker.
	BreakerChanged(from, to BreakerState)
}

// NopObserver is an [Observer] that discards everything.
type NopObserver struct{}

// ObserveCall does nothing.
func (NopObserver) ObserveCall(Call) {}

// BreakerChanged does nothing.
func (NopObserver) BreakerChanged(_, _ BreakerState) {}
