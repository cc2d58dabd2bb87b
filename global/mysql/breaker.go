package mysql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/internal/breaker"
)

// newBreaker returns the circuit breaker of b (defaults applied), logging
// and observing its state changes.
func newBreaker(b BreakerConfig, log *slog.Logger, obs Observer) *gobreaker.CircuitBreaker[struct{}] {
	return breaker.New(breaker.Settings{
		Name:                "global-mysql",
		ConsecutiveFailures: b.ConsecutiveFailures,
		HalfOpenProbes:      b.HalfOpenProbes,
		OpenTimeout:         b.OpenTimeout,
		OnChange: func(from, to BreakerState) {
			log.Log(context.Background(), to.LogLevel(), "global/mysql: circuit breaker "+to.String(),
				slog.String("from", from.String()), slog.String("to", to.String()))
			obs.BreakerChanged(from, to)
		},
	})
}

// tally counts what a call did, for its Observer call.
type tally struct{ rows, cells, statements int }

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
	out, err := breaker.Run(ctx, s.breaker, s.cfg.Timeout,
		func(cctx context.Context) error { return fn(cctx, &t) }, classify)
	s.obs.ObserveCall(Call{Op: op, Outcome: out, Rows: t.rows, Cells: t.cells, Statements: t.statements, Elapsed: time.Since(start)})
	switch out {
	case OutcomeOK:
		return nil
	case OutcomeRejected:
		return fmt.Errorf("global/mysql: %s: %w: circuit breaker is %s", op, global.ErrUnavailable, s.BreakerState())
	case OutcomeTimeout, OutcomeUnavailable:
		return fmt.Errorf("global/mysql: %s: %w: %w", op, global.ErrUnavailable, err)
	default:
		return fmt.Errorf("global/mysql: %s: %w", op, err)
	}
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

// classify returns the outcome of err, the failure of a call that neither
// the caller canceled nor a deadline ended (breaker.Run tells those apart).
func classify(err error) Outcome {
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
