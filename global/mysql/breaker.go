package mysql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice/global"
)

// newBreaker returns the circuit breaker of b (defaults applied), logging
// and observing its state changes.
func newBreaker(b BreakerConfig, log *slog.Logger, obs Observer) *gobreaker.CircuitBreaker[struct{}] {
	return gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "global-mysql",
		MaxRequests: b.HalfOpenProbes,
		Timeout:     b.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= b.ConsecutiveFailures },
		IsSuccessful: func(err error) bool {
			out := outcomeOf(err)
			return out == OutcomeOK || out == OutcomeError
		},
		IsExcluded: func(err error) bool { return outcomeOf(err) == OutcomeCanceled },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			f, t := breakerState(from), breakerState(to)
			level := slog.LevelInfo
			if t == BreakerOpen {
				level = slog.LevelWarn
			}
			log.Log(context.Background(), level, "global/mysql: circuit breaker "+t.String(),
				slog.String("from", f.String()), slog.String("to", t.String()))
			obs.BreakerChanged(f, t)
		},
	})
}

// tally counts what a call did, for its Observer call.
type tally struct{ rows, statements int }

// do runs fn through the circuit breaker with the call's deadline, observes
// it and wraps its error as "global/mysql: <op>: ...".
func (s *Store) do(ctx context.Context, op Op, fn func(context.Context, *tally) error) error {
	if s.closed.Load() {
		return fmt.Errorf("global/mysql: %s: %w: %w", op, ErrClosed, global.ErrUnavailable)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("global/mysql: %s: %w", op, err)
	}
	start := time.Now()
	var t tally
	_, err := s.breaker.Execute(func() (struct{}, error) {
		cctx := ctx
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
			defer cancel()
		}
		if err := fn(cctx, &t); err != nil {
			return struct{}{}, &callError{outcome: classify(ctx, err), err: err}
		}
		return struct{}{}, nil
	})
	out := outcomeOf(err)
	s.obs.ObserveCall(Call{Op: op, Outcome: out, Rows: t.rows, Statements: t.statements, Elapsed: time.Since(start)})
	switch out {
	case OutcomeOK:
		return nil
	case OutcomeRejected:
		return fmt.Errorf("global/mysql: %s: %w: circuit breaker is %s", op, global.ErrUnavailable, s.BreakerState())
	case OutcomeTimeout, OutcomeUnavailable:
		return fmt.Errorf("global/mysql: %s: %w: %w", op, global.ErrUnavailable, cause(err))
	default:
		return fmt.Errorf("global/mysql: %s: %w", op, cause(err))
	}
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

// outcomeOf returns the outcome of an error returned by breaker.Execute.
func outcomeOf(err error) Outcome {
	if err == nil {
		return OutcomeOK
	}
	if ce, ok := errors.AsType[*callError](err); ok {
		return ce.outcome
	}
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return OutcomeRejected
	}
	return OutcomeUnavailable
}

// outageErrors are the server error numbers that mean the server cannot
// serve right now, as opposed to a problem with one statement.
var outageErrors = map[uint16]bool{
	1040: true, // ER_CON_COUNT_ERROR: too many connections
	1053: true, // ER_SERVER_SHUTDOWN
	1205: true, // ER_LOCK_WAIT_TIMEOUT
	1213: true, // ER_LOCK_DEADLOCK (after the retries)
	1290: true, // ER_OPTION_PREVENTS_STATEMENT (--read-only)
	1836: true, // ER_READ_ONLY_MODE
	1927: true, // ER_CONNECTION_KILLED (MariaDB)
	4031: true, // ER_CLIENT_INTERACTION_TIMEOUT (MySQL)
}

// classify returns the outcome of err, returned by a call made under the
// caller's context parent.
func classify(parent context.Context, err error) Outcome {
	if errors.Is(parent.Err(), context.Canceled) {
		return OutcomeCanceled
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return OutcomeTimeout
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return OutcomeTimeout
	}
	if me, ok := errors.AsType[*mysqldriver.MySQLError](err); ok {
		if outageErrors[me.Number] {
			return OutcomeUnavailable
		}
		return OutcomeError
	}
	// Everything else failed on the way to the server or back: refused,
	// reset or broken connections (driver.ErrBadConn, ErrInvalidConn).
	return OutcomeUnavailable
}
