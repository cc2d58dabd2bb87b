package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	mysqldriver "github.com/go-sql-driver/mysql"
)

// Cleanup implements [global.Store]. On a connection of its own it takes a
// named lock without waiting (GET_LOCK with timeout 0); if another node
// holds it, Cleanup returns 0 at once. Otherwise it deletes expired batch
// rows, then expired denials, then the expired rows of the per-entry
// counters table that earlier releases wrote, batch rows per DELETE, each table until a
// DELETE removes fewer than batch rows; then it compacts the old rows of
// long windows (see compactAge), and releases the lock on the same
// connection. It returns the rows deleted (expired, or merged into fewer
// rows), also when it fails partway. A batch under 1 is [ErrInvalidInput].
func (s *Store) Cleanup(ctx context.Context, now int64, batch int) (int, error) {
	if batch < 1 {
		return 0, fmt.Errorf("%w: cleanup batch %d is under 1", ErrInvalidInput, batch)
	}
	deleted := 0
	err := s.do(ctx, OpCleanup, func(ctx context.Context, t *tally) (err error) {
		defer func() { deleted = t.rows }()
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		t.statements++
		if err := getLock(ctx, conn, s.cleanup, 0); errors.Is(err, errLockBusy) {
			return nil
		} else if err != nil {
			return err
		}
		defer func() {
			t.statements++
			err = errors.Join(err, releaseLock(conn, s.cleanup))
		}()
		for _, q := range []string{s.q.deleteBatches, s.q.deleteDenials, s.q.deleteLegacy} {
			if err := deleteExpired(ctx, t, conn, q, now, batch); err != nil && (q != s.q.deleteLegacy || !tableMissing(err)) {
				return err
			}
		}
		return s.compact(ctx, t, conn, now)
	})
	return deleted, err
}

// tableMissing reports whether err is MySQL's error 1146, "table doesn't
// exist": the earlier releases' counters table, dropped by hand.
func tableMissing(err error) bool {
	me, ok := errors.AsType[*mysqldriver.MySQLError](err)
	return ok && me.Number == 1146
}

// deleted returns a function that adds the rows a DELETE's result
// affected to t.rows and returns them, or the DELETE's error.
func deleted(t *tally) func(sql.Result, error) (int, error) {
	return func(res sql.Result, err error) (int, error) {
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		t.rows += int(n)
		return int(n), err
	}
}

// deleteExpired runs the DELETE … LIMIT batch query q until it removes
// fewer than batch rows, adding the rows it removes to t.rows.
func deleteExpired(ctx context.Context, t *tally, conn *sql.Conn, q string, now int64, batch int) error {
	for {
		n, err := deleted(t)(exec(ctx, t, conn, q, now, batch))
		if err != nil {
			return err
		}
		if n < batch {
			return nil
		}
	}
}
