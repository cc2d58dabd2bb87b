package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/sluicehq/sluice/global"
)

// read is the answer of one read statement (see readCells): the cells and
// the denials it returned, and its clock row.
type read struct {
	cells   []global.Imported
	denials []global.Denial
	clock   int64 // the database clock at the statement's start, µs since the epoch
	regions int   // the other regions announced recently
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
		var ws, ns, id, region []byte
		var dur, seq, a, b, expires sql.NullInt64
		if err := rows.Scan(&kind, &ws, &ns, &id, &dur, &seq, &a, &b, &region, &expires); err != nil {
			return err
		}
		switch kind {
		case kindCell:
			r.cells = append(r.cells, global.Imported{Cell: cellOf(ws, ns, id, dur.Int64, seq.Int64), Others: a.Int64, Own: b.Int64})
		case kindDenial:
			r.denials = append(r.denials, global.Denial{Cell: cellOf(ws, ns, id, dur.Int64, seq.Int64),
				Limit: a.Int64, Usage: b.Int64, Region: string(region), ExpiresAt: expires.Int64})
		case kindClock:
			r.clock, r.regions = a.Int64, int(b.Int64)
			clocks++
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if clocks != 1 {
		return errNoClock
	}
	t.rows = len(r.cells) + len(r.denials)
	return nil
}

// next returns the cursor for the next read: the clock minus overlap.
func (r *read) next(overlap time.Duration) global.Cursor {
	return global.Cursor(max(r.clock-overlap.Microseconds(), 0))
}

// pull returns r as the answer of a Pull, this region counted.
func (r *read) pull(overlap time.Duration) global.Pull {
	return global.Pull{Cells: r.cells, Regions: r.regions + 1, Next: r.next(overlap)}
}
