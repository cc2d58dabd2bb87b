// Package breaker holds the circuit-breaker mechanics that Sluice's clients
// of remote services share (global/mysql, origin/redis and the peers of
// origin/cluster): the breaker's State, the construction of a
// sony/gobreaker v2 breaker from a few settings, and Run, which sends one
// call through a breaker and says how it ended. Each package keeps its own
// error classification, error messages, telemetry and logging.
package breaker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/sony/gobreaker/v2"
)

// State is the state of a circuit breaker.
type State int

// The circuit breaker states.
const (
	// Closed: calls go to the service.
	Closed State = iota
	// HalfOpen: a limited number of probe calls go to the service; success
	// closes the breaker, failure opens it again.
	HalfOpen
	// Open: calls fail at once, without touching the network.
	Open
)

// String returns "closed", "half-open" or "open" ("unknown" for any other
// value).
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	default:
		return "unknown"
	}
}

// LogLevel returns the level a change to s is logged at: Warn when the
// breaker opens, Info otherwise.
func (s State) LogLevel() slog.Level {
	if s == Open {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// StateOf returns the State of a gobreaker state; anything it does not know
// is Closed.
func StateOf(s gobreaker.State) State {
	switch s {
	case gobreaker.StateHalfOpen:
		return HalfOpen
	case gobreaker.StateOpen:
		return Open
	default:
		return Closed
	}
}

// Outcome classifies how a call through a breaker ended. The packages that
// use a breaker declare their Outcome types (metric labels) with these
// values.
type Outcome string

// The outcomes of a call. OK and Error count as successes for the breaker,
// Timeout and Unavailable as failures; Canceled does not count at all.
const (
	// OK: the call succeeded.
	OK Outcome = "ok"
	// Error: the service answered with an error that is not an outage.
	Error Outcome = "error"
	// Timeout: the call's deadline passed first.
	Timeout Outcome = "timeout"
	// Unavailable: the service could not be reached or answered that it
	// cannot serve.
	Unavailable Outcome = "unavailable"
	// Rejected: the breaker refused the call without touching the network.
	Rejected Outcome = "rejected"
	// Canceled: the caller canceled its context.
	Canceled Outcome = "canceled"
)

// Settings configures a breaker made by [New].
type Settings struct {
	// Name names the breaker (gobreaker.Settings.Name).
	Name string
	// ConsecutiveFailures failed calls in a row open a closed breaker,
	// unless ReadyToTrip is set.
	ConsecutiveFailures uint32
	// ReadyToTrip, if set, replaces the ConsecutiveFailures rule: it opens
	// the closed breaker when it returns true for the counts of the Window.
	ReadyToTrip func(gobreaker.Counts) bool
	// Window is the rolling window (ten buckets) over which a closed
	// breaker counts calls. Zero keeps the counts until the state changes.
	Window time.Duration
	// HalfOpenProbes is the number of calls let through while half-open.
	HalfOpenProbes uint32
	// OpenTimeout is how long the breaker stays open before it lets probe
	// calls through.
	OpenTimeout time.Duration
	// Outcome classifies the error of a call for the breaker's counts. nil
	// means the outcomes carried by [Run].
	Outcome func(error) Outcome
	// OnChange, if set, is called on every state change, while the breaker
	// holds its lock: it must not call back into the breaker.
	OnChange func(from, to State)
}

// New returns a gobreaker circuit breaker for s. Calls whose outcome is OK
// or Error count as successes, Timeout and Unavailable as failures, and
// Canceled calls are not counted (nor are Rejected ones, which never run).
func New(s Settings) *gobreaker.CircuitBreaker[struct{}] {
	outcome := s.Outcome
	if outcome == nil {
		outcome = outcomeOf
	}
	trip := s.ReadyToTrip
	if trip == nil {
		trip = func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= s.ConsecutiveFailures }
	}
	return gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         s.Name,
		MaxRequests:  s.HalfOpenProbes,
		Interval:     s.Window,
		BucketPeriod: s.Window / 10,
		Timeout:      s.OpenTimeout,
		ReadyToTrip:  trip,
		IsSuccessful: func(err error) bool {
			out := outcome(err)
			return out == OK || out == Error
		},
		IsExcluded: func(err error) bool { return outcome(err) == Canceled },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if s.OnChange != nil {
				s.OnChange(StateOf(from), StateOf(to))
			}
		},
	})
}

// Run sends fn through cb and returns how it ended, with the error fn
// failed with (or, when cb refused the call, cb's error). fn runs under ctx,
// bounded by timeout when ctx has no deadline of its own. A failure is
// Canceled when the caller canceled ctx and Timeout when a deadline or a
// network timeout ended it; otherwise classify decides. O is the calling
// package's Outcome type, whose values are this package's.
func Run[O ~string](ctx context.Context, cb *gobreaker.CircuitBreaker[struct{}], timeout time.Duration,
	fn func(context.Context) error, classify func(error) O,
) (O, error) {
	_, err := cb.Execute(func() (struct{}, error) {
		cctx := ctx
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		if err := fn(cctx); err != nil {
			return struct{}{}, &callError{outcome: classifyFailure(ctx, err, classify), err: err}
		}
		return struct{}{}, nil
	})
	return O(outcomeOf(err)), cause(err)
}

// classifyFailure returns the outcome of err, returned by a call made under
// the caller's context parent.
func classifyFailure[O ~string](parent context.Context, err error, classify func(error) O) Outcome {
	if errors.Is(parent.Err(), context.Canceled) {
		return Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return Timeout
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return Timeout
	}
	return Outcome(classify(err))
}

// callError carries the outcome of a failed call through the breaker.
type callError struct {
	outcome Outcome
	err     error
}

func (e *callError) Error() string { return e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

// cause returns the error a call failed with, without its callError wrapper.
func cause(err error) error {
	if ce, ok := errors.AsType[*callError](err); ok {
		return ce.err
	}
	return err
}

// outcomeOf returns the outcome of an error returned by Execute.
func outcomeOf(err error) Outcome {
	if err == nil {
		return OK
	}
	if ce, ok := errors.AsType[*callError](err); ok {
		return ce.outcome
	}
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return Rejected
	}
	return Unavailable
}
