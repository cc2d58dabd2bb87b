package mysql

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/global"
)

// deadlockRetries is how many times a statement is sent in all when InnoDB
// keeps choosing it as a deadlock victim. Sorted writes make deadlocks rare,
// not impossible (gap locks of concurrent inserts, a cleanup deleting in
// expiry order).
const deadlockRetries = 3

// countRow is one row of a Publish.
type countRow struct {
	key rowKey
	global.Count
}

// Publish implements [global.Store]: it upserts region's counts with
// count = GREATEST(count, new), in primary-key order, in chunks of
// Config.ChunkRows rows, each chunk one statement; it does not announce
// region (see Announce), and a call with no count to write sends nothing.
// Counts of 0 or less are not written (an absent row counts 0). Chunks
// commit one by one: a failed call may have written some of them, which
// the next Publish makes good.
//
// A cell that cannot be stored exactly (see [ErrInvalidInput]) is left out
// and the others are written; the call then returns an error wrapping
// ErrInvalidInput that counts them. A region that cannot be stored fails
// the call before anything is sent.
func (s *Store) Publish(ctx context.Context, region string, counts []global.Count, now int64) error {
	if err := checkRegion(region); err != nil {
		return err
	}
	rows, skipped := countRows(counts)
	if len(rows) == 0 {
		return skipped.err()
	}
	err := s.do(ctx, OpPublish, func(ctx context.Context, t *tally) error {
		for chunk := range slices.Chunk(rows, s.cfg.ChunkRows) {
			args := make([]any, 0, 9*len(chunk))
			for _, r := range chunk {
				c := r.Cell
				args = append(args, r.key.hash[:], r.key.durationMS, r.key.seq, []byte(region),
					[]byte(c.Workspace), []byte(c.Namespace), []byte(c.Identifier), r.Count.Count, r.ExpiresAt)
			}
			if _, err := exec(ctx, t, s.db, s.q.counts.statement(len(chunk)), args...); err != nil {
				return err
			}
			t.rows += len(chunk)
		}
		return nil
	})
	return errors.Join(err, skipped.err())
}

// countRows returns the rows to write: positive counts of cells that can be
// stored, one row per cell (the highest count and expiry of the call),
// sorted by primary key; and the cells left out.
func countRows(counts []global.Count) ([]countRow, skips) {
	var skipped skips
	rows := make([]countRow, 0, len(counts))
	for _, c := range counts {
		if p := cellProblem(c.Cell); p != "" {
			skipped.add(p)
			continue
		}
		if c.Count > 0 {
			rows = append(rows, countRow{key: keyOf(c.Cell), Count: c})
		}
	}
	slices.SortFunc(rows, func(a, b countRow) int { return a.key.compare(b.key) })
	out := rows[:0]
	for _, r := range rows {
		if n := len(out); n > 0 && out[n-1].key == r.key {
			out[n-1].Count.Count = max(out[n-1].Count.Count, r.Count.Count)
			out[n-1].ExpiresAt = max(out[n-1].ExpiresAt, r.ExpiresAt)
			continue
		}
		out = append(out, r)
	}
	return out, skipped
}

// execer is a *sql.DB or a *sql.Conn.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// exec runs one statement on db, again when InnoDB chose it as a deadlock
// victim, and counts the statements sent.
func exec(ctx context.Context, t *tally, db execer, query string, args ...any) (sql.Result, error) {
	for attempt := 1; ; attempt++ {
		t.statements++
		res, err := db.ExecContext(ctx, query, args...)
		me, ok := errors.AsType[*mysqldriver.MySQLError](err)
		if !ok || me.Number != 1213 || attempt == deadlockRetries {
			return res, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt) * 5 * time.Millisecond):
		}
	}
}

// Announce implements [global.Store]: it upserts region's last_seen with
// GREATEST, so an older now never moves it back.
func (s *Store) Announce(ctx context.Context, region string, now int64) error {
	if err := checkRegion(region); err != nil {
		return err
	}
	return s.do(ctx, OpAnnounce, func(ctx context.Context, t *tally) error {
		if _, err := exec(ctx, t, s.db, s.q.announce, []byte(region), now); err != nil {
			return err
		}
		t.rows = 1
		return nil
	})
}

// Pull implements [global.Store]. In one statement it reads every counter
// row (a region's entry of a cell) changed after the cursor and still
// active at now, the number of other recent regions, and the database
// clock at the statement's start. The cursor it returns is that
// clock minus Config.CursorOverlap, so cells changed within the overlap
// are reported again by the next Pull. Most pulls are recent (see
// recentReads): they read from the last pull's clock less a second instead,
// and return the cursor passed in.
//
// With Config.ReadDSN the statement goes to the replica, and the clock is
// instead the newest change of any row the replica shows, its witness:
// the cursor it returns is the witness minus the overlap, never before the
// cursor passed in, so that no row the replica has yet to show is passed
// (see Config.ReadDSN and docs/explanation/read-replicas.md).
//
// From a cursor that is not recent (see pullStatement), it reads only the
// oldest Config.PageRows rows changed after it (a page, see
// readPage), and where more rows changed, returns the instant before the
// page's last change instead, if that is earlier: the next Pull goes on
// from there.
func (s *Store) Pull(ctx context.Context, region string, cursor global.Cursor, now, activeFor int64) (global.Pull, error) {
	if err := checkRegion(region); err != nil {
		return global.Pull{}, err
	}
	r := read{now: now, witness: s.rq.witness}
	from, whole := s.recent.from(region, cursor, now, s.cfg.CursorOverlap)
	query, cells, paged := s.pullStatement(s.rq.pull, s.rq.pullPage, region, from, now)
	err := s.do(ctx, OpPull, func(ctx context.Context, t *tally) error {
		return r.run(ctx, t, s.reads, query, append(cells, now-activeFor, []byte(region))...) // the cells, the clock and the regions
	})
	if err != nil {
		return global.Pull{}, err
	}
	full := paged && r.pageRows >= int64(s.cfg.PageRows) // a page that left rows for the next pull
	return s.recent.after(region, cursor, whole, full, now, r.clock, s.pulled(&r, from)), nil
}

// PullWithDenials implements [global.PullerWithDenials]: Pull and Denials
// in one statement, whose clock gives both cursors.
func (s *Store) PullWithDenials(ctx context.Context, region string, cursor, denialCursor global.Cursor, now, activeFor int64) (global.Pull, []global.Denial, global.Cursor, error) {
	if err := checkRegion(region); err != nil {
		return global.Pull{}, nil, denialCursor, err
	}
	r := read{now: now, witness: s.rq.witness}
	from, whole := s.recent.from(region, cursor, now, s.cfg.CursorOverlap)
	query, args, paged := s.pullStatement(s.rq.both, s.rq.bothPage, region, from, now)
	args = append(args, cursorTime(int64(denialCursor)), now, []byte(region), // the denials
		now-activeFor, []byte(region)) // the clock and the regions
	err := s.do(ctx, OpPullWithDenials, func(ctx context.Context, t *tally) error {
		return r.run(ctx, t, s.reads, query, args...)
	})
	if err != nil {
		return global.Pull{}, nil, denialCursor, err
	}
	full := paged && r.pageRows >= int64(s.cfg.PageRows)
	p := s.recent.after(region, cursor, whole, full, now, r.clock, s.pulled(&r, from))
	return p, r.denials, r.bound(denialCursor, s.cfg.CursorOverlap), nil
}

// pagedAfter is how much older than now, beyond Config.CursorOverlap, a
// cursor must be for a pull to read a page rather than every change: a
// node's pulls one interval apart keep their cursor within the overlap and
// an interval of now, while a node's first pull, and its pulls after
// failures, start from further back.
const pagedAfter = 10 * time.Second

// pullStatement returns the statement of a pull from cursor at now (all, a
// whole read, or paged, a page) and the arguments of its cells' part. A
// cursor counts as recent while it is within CursorOverlap and pagedAfter
// of now, by the limiter's clock: a skew between that clock and the
// database's only moves the point where pulls change statement, and a whole
// read that outlasts the store's Timeout leaves the cursor where it was, so
// that the pulls after it page. On a replica, a pull from a cursor that a
// full page could not move (see pulled) reads every change. On a replica the cursor trails the limiter's
// clock by the replica's lag too (and, while nothing is written, by the time
// since the last write): a replica that lags more than pagedAfter is read a
// page at a time.
func (s *Store) pullStatement(all, paged, region string, cursor global.Cursor, now int64) (query string, args []any, isPaged bool) {
	from := cursorTime(int64(cursor))
	recent := int64(cursor)/1000 >= now-(s.cfg.CursorOverlap+pagedAfter).Milliseconds()
	if recent || (s.rq.witness && s.stuck.CompareAndSwap(int64(cursor), -1)) {
		return all, []any{from, now}, false
	}
	return paged, []any{from, s.cfg.PageRows}, true
}

// pulled returns r as the answer of a Pull from cursor. On a replica, a
// full page whose cursor could not move (read.next: every row after the
// cursor is within the overlap of the witness, and a row may still land
// among them) would be read again and again, the rows after it only once
// a newer row lands: pulled remembers that cursor, and the next pull from
// it reads every change instead (pullStatement), once, whatever its age.
func (s *Store) pulled(r *read, cursor global.Cursor) global.Pull {
	p := r.pull(cursor, s.cfg.CursorOverlap, s.cfg.PageRows)
	if r.witness && p.Next == cursor && r.pageRows >= int64(s.cfg.PageRows) {
		s.stuck.Store(int64(cursor))
	}
	return p
}
