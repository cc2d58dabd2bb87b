package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/origin"
)

// read is the answer of one read statement (see readBatches): the entries
// and the denials it returned, and its clock row.
type read struct {
	entries []global.Entry
	at      map[entryKey]int // the index in entries of each (cell, region)
	denials []global.Denial
	// clock is the database clock at the statement's start, µs since the
	// epoch; on a replica (witness), the witness (see witnessExpr).
	clock   int64
	witness bool
	regions int // the other regions announced recently
	// now is the limiter's clock of the read (Unix ms): entries that expired
	// by then are left out of entries.
	now int64
	// pageRows is the number of rows a pull's page took, and pageLast the
	// changed_at of the last of them, µs since the epoch (see readPage).
	pageRows, pageLast int64
	// rows counts the batch rows read, and bad those whose payload did not
	// decode (their cells before the fault are kept).
	rows, bad int
}

// entryKey is a (cell, region): one G-Counter entry.
type entryKey struct {
	cell   origin.Cell
	region string
}

// run sends the read statement query with args and scans its rows into r.
func (r *read) run(ctx context.Context, t *tally, db *sql.DB, query string, args ...any) error {
	t.statements++
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	clocks := 0
	for rows.Next() {
		var kind rowKind
		var a, b, c, region []byte
		var d, e, f, g, expires, pageRows, pageLast sql.NullInt64
		if err := rows.Scan(&kind, &a, &b, &c, &d, &e, &f, &g, &region, &expires, &pageRows, &pageLast); err != nil {
			return err
		}
		switch kind {
		case kindBatch:
			r.rows++
			r.pageRows += pageRows.Int64
			r.pageLast = max(r.pageLast, pageLast.Int64)
			if expires.Int64 > r.now {
				r.addBatch(string(region), a)
			}
		case kindDenial:
			r.denials = append(r.denials, global.Denial{Cell: cellOf(a, b, c, d.Int64, e.Int64),
				Limit: f.Int64, Usage: g.Int64, Region: string(region), ExpiresAt: expires.Int64})
		case kindClock:
			r.clock, r.regions = f.Int64, int(g.Int64)
			clocks++
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if clocks != 1 {
		return errNoClock
	}
	t.rows, t.cells = r.rows+len(r.denials), len(r.entries)
	return nil
}

// addBatch adds the active cells of region's batch row payload to the
// entries, keeping the highest count of each (cell, region).
func (r *read) addBatch(region string, payload []byte) {
	if r.at == nil {
		r.at = make(map[entryKey]int)
	}
	err := decodeBatch(payload, r.now, func(c origin.Cell, n int64) {
		k := entryKey{c, region}
		if i, ok := r.at[k]; ok {
			r.entries[i].Count = max(r.entries[i].Count, n)
			return
		}
		r.at[k] = len(r.entries)
		r.entries = append(r.entries, global.Entry{Cell: c, Region: region, Count: n})
	})
	if err != nil {
		r.bad++
	}
}

// bound returns the cursor for the next read of what is not paged (the
// denials, or the cells of a pull that read every change) after a read
// from cursor: no row that this read could not see changed at or before
// it. On the primary it is the clock minus overlap: a row that committed
// after the read started did not start before that. On a replica it is the
// witness minus overlap (see witnessExpr), never before cursor: the rows
// that the replica does not show yet, however far it lags, changed after
// that, and the cursor read from stays where the replica shows nothing
// newer (a paused or lagging replica, empty tables), so a row that lands
// late is read once it lands. The cost of a lagging replica is the delay,
// and, while it shows no new row, reading again the rows changed within
// overlap of the witness.
func (r *read) bound(cursor global.Cursor, overlap time.Duration) global.Cursor {
	next := global.Cursor(max(r.clock-overlap.Microseconds(), 0))
	if r.witness {
		return max(next, cursor)
	}
	return next
}

// next returns the cursor for the next pull after one from cursor whose
// pages hold pageRows rows: bound's, or, after a full page,
// the instant before its last row's change if that is earlier, so that
// the next pull reads again the rows changed at that instant (the page
// may have taken some of them only) and goes on. No row changed that long
// ago can still arrive: it is before bound's. Only where a whole page
// changed at one instant (more than pageRows rows written in one
// microsecond) does the next pull go on after that instant instead, the
// rest of those rows left for their next change. On a replica whose
// witness minus overlap is not past cursor, a full page leaves the cursor
// where it was, as no row after it can be told apart from a row still to
// land; the next pull from it reads every change (see Store.pulled).
func (r *read) next(cursor global.Cursor, overlap time.Duration, pageRows int) global.Cursor {
	next := r.bound(cursor, overlap)
	if r.pageRows < int64(pageRows) {
		return next
	}
	resume := global.Cursor(r.pageLast - 1)
	if resume <= cursor {
		resume = global.Cursor(r.pageLast)
	}
	return min(next, resume)
}

// pull returns r as the answer of a Pull from cursor, this region counted.
func (r *read) pull(cursor global.Cursor, overlap time.Duration, pageRows int) global.Pull {
	return global.Pull{Entries: r.entries, Regions: r.regions + 1, Next: r.next(cursor, overlap, pageRows)}
}
