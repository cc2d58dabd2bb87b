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

// Publish implements [global.Store]: it appends region's counts to the
// batches table, packed Config.ChunkRows cells to a row (see batch), the
// rows of a call in as few INSERT statements as keep each under
// maxStatementPayload bytes of payload and a pull's page of rows (see
// statements); it does not announce region (see
// Announce), and a call with no count to write sends nothing. Counts of 0 or
// less are not written (an absent entry counts 0). Nothing stored changes:
// a cell's entry is the highest count of its rows (readers take the max), so
// a Publish of a lower count than stored changes no entry. Statements commit
// one by one: a failed call may have written some of them, which the next
// Publish makes good.
//
// A cell that cannot be stored exactly (see [ErrInvalidInput]) is left out
// and the others are written; the call then returns an error wrapping
// ErrInvalidInput that counts them. A region that cannot be stored fails
// the call before anything is sent.
func (s *Store) Publish(ctx context.Context, region string, counts []global.Count, now int64) error {
	if err := checkRegion(region); err != nil {
		return err
	}
	sorted, skipped := sortedCounts(counts)
	if len(sorted) == 0 {
		return skipped.err()
	}
	batches := packBatches(sorted, s.cfg.ChunkRows)
	err := s.do(ctx, OpPublish, func(ctx context.Context, t *tally) error {
		for _, stmt := range statements(batches, s.pageBatches()) {
			args := make([]any, 0, 4*len(stmt))
			for _, b := range stmt {
				args = append(args, []byte(region), b.cells, b.payload, b.expiresAt)
			}
			if _, err := exec(ctx, t, s.db, s.q.batches.statement(len(stmt)), args...); err != nil {
				return err
			}
			for _, b := range stmt {
				t.rows++
				t.cells += b.cells
			}
		}
		return nil
	})
	return errors.Join(err, skipped.err())
}

// PublishCost returns the rows and the statements a Publish of counts
// writes on a store configured with cfg: what a simulation of the store
// counts for it. It sends nothing.
func PublishCost(cfg Config, counts []global.Count) (rows, stmts int) {
	cfg = cfg.withDefaults()
	sorted, _ := sortedCounts(counts)
	batches := packBatches(sorted, cfg.ChunkRows)
	return len(batches), len(statements(batches, pageBatches(cfg)))
}

// maxStatementPayload bounds the payload bytes of one INSERT: escaped, at
// most twice as many bytes of statement, well under 16 MB, MariaDB's default
// max_allowed_packet (MySQL 8: 64 MB). A row alone never passes it (at most
// MaxChunkRows cells of at most maxCellBytes).
const maxStatementPayload = 4 << 20

// statements splits batches into the rows of successive INSERTs, each at
// most maxRows rows and maxStatementPayload bytes of payload (or one row).
// Rows of one statement are written at one instant, and a pull's page
// goes on after the instant of its last row only where the page is all
// of one instant (see read.next): maxRows is a page's rows, so that a
// page never ends within a statement of a full page.
func statements(batches []batch, maxRows int) [][]batch {
	if len(batches) == 0 {
		return nil
	}
	var out [][]batch
	start, size := 0, 0
	for i, b := range batches {
		if i > start && (size+len(b.payload) > maxStatementPayload || i-start == maxRows) {
			out = append(out, batches[start:i])
			start, size = i, 0
		}
		size += len(b.payload)
	}
	return append(out, batches[start:])
}

// sortedCounts returns the counts to write: positive counts of cells that
// can be stored, one per cell (the highest count and expiry of the call),
// sorted by compareCells; and the cells left out.
func sortedCounts(counts []global.Count) ([]global.Count, skips) {
	var skipped skips
	out := make([]global.Count, 0, len(counts))
	for _, c := range counts {
		if p := cellProblem(c.Cell); p != "" {
			skipped.add(p)
			continue
		}
		if c.Count > 0 {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b global.Count) int { return compareCells(a.Cell, b.Cell) })
	merged := out[:0]
	for _, c := range out {
		if n := len(merged); n > 0 && merged[n-1].Cell == c.Cell {
			merged[n-1].Count = max(merged[n-1].Count, c.Count)
			merged[n-1].ExpiresAt = max(merged[n-1].ExpiresAt, c.ExpiresAt)
			continue
		}
		merged = append(merged, c)
	}
	return merged, skipped
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

// Pull implements [global.Store]. In one statement it reads every batch
// row (many cells' counts of one region) written after the cursor and
// still active at now, the number of other recent regions, and the
// database clock at the statement's start, and returns the active cells'
// entries, each (cell, region) once with the highest count read. The
// cursor it returns is that clock minus Config.CursorOverlap, so rows
// written within the overlap are read again by the next Pull. Most pulls are recent (see
// recentReads): they read from the last pull's clock less a second instead,
// and return the cursor passed in.
//
// With Config.ReadDSN the statement goes to the replica, and the clock is
// instead the newest change of any row the replica shows, its witness:
// the cursor it returns is the witness minus the overlap, never before the
// cursor passed in, so that no row the replica has yet to show is passed
// (see Config.ReadDSN and docs/read-replicas.md).
//
// From a cursor that is not recent (see pullStatement), it reads only the
// oldest rows written after it, Config.PageRows cells' worth (a page, see
// readPage and pageBatches), and where more rows were written, returns the instant before the
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
	s.logBad(&r)
	full := paged && r.pageRows >= int64(s.pageBatches()) // a page that left rows for the next pull
	return s.recent.after(region, cursor, whole, full, now, r.clock, s.pulled(&r, from)), nil
}

// PullWithDenials implements [global.PullerWithDenials]: Pull and Denials
// in one statement, whose clock gives both cursors. Reads of denials are
// recent or whole as pulls are (see recentReads), each kind on its own.
func (s *Store) PullWithDenials(ctx context.Context, region string, cursor, denialCursor global.Cursor, now, activeFor int64) (global.Pull, []global.Denial, global.Cursor, error) {
	if err := checkRegion(region); err != nil {
		return global.Pull{}, nil, denialCursor, err
	}
	r := read{now: now, witness: s.rq.witness}
	from, whole := s.recent.from(region, cursor, now, s.cfg.CursorOverlap)
	query, args, paged := s.pullStatement(s.rq.both, s.rq.bothPage, region, from, now)
	denialFrom, denialsWhole := s.denied.from(region, denialCursor, now, s.cfg.CursorOverlap)
	args = append(args, cursorTime(int64(denialFrom)), now, []byte(region), // the denials
		now-activeFor, []byte(region)) // the clock and the regions
	err := s.do(ctx, OpPullWithDenials, func(ctx context.Context, t *tally) error {
		return r.run(ctx, t, s.reads, query, args...)
	})
	if err != nil {
		return global.Pull{}, nil, denialCursor, err
	}
	s.logBad(&r)
	full := paged && r.pageRows >= int64(s.pageBatches())
	p := s.recent.after(region, cursor, whole, full, now, r.clock, s.pulled(&r, from))
	next := s.denied.next(region, denialCursor, denialsWhole, false, now, r.clock, r.bound(denialFrom, s.cfg.CursorOverlap))
	return p, r.denials, next, nil
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
	return paged, []any{from, s.pageBatches()}, true
}

// pageBatches is the number of batch rows a page reads: Config.PageRows
// cells' worth of full rows, at least one.
func (s *Store) pageBatches() int { return pageBatches(s.cfg) }

// pageBatches is the number of batch rows a page of cfg reads (cfg with
// its defaults).
func pageBatches(cfg Config) int {
	return max(cfg.PageRows/cfg.ChunkRows, 1)
}

// logBad warns of the batch rows of r whose payload did not decode (a row
// of a newer format, or a damaged one): their cells are not read.
func (s *Store) logBad(r *read) {
	if r.bad > 0 {
		s.log.Warn("global/mysql: batch rows do not decode; their cells are not read", "rows", r.bad)
	}
}

// pulled returns r as the answer of a Pull from cursor. On a replica, a
// full page whose cursor could not move (read.next: every row after the
// cursor is within the overlap of the witness, and a row may still land
// among them) would be read again and again, the rows after it only once
// a newer row lands: pulled remembers that cursor, and the next pull from
// it reads every change instead (pullStatement), once, whatever its age.
func (s *Store) pulled(r *read, cursor global.Cursor) global.Pull {
	p := r.pull(cursor, s.cfg.CursorOverlap, s.pageBatches())
	if r.witness && p.Next == cursor && r.pageRows >= int64(s.pageBatches()) {
		s.stuck.Store(int64(cursor))
	}
	return p
}
