package mysql

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/global"
)

// denialRow is one row of an EmitDenials.
type denialRow struct {
	key rowKey
	global.Denial
}

// EmitDenials implements [global.Store]: it inserts the denials in
// primary-key order, in chunks of Config.ChunkRows rows; a cell already
// recorded keeps its first row (and its place for cursors). Within one call
// the first denial of a cell wins too. A denial that cannot be stored
// exactly (see [ErrInvalidInput]) is left out and the others are written;
// the call then returns an error wrapping ErrInvalidInput that counts them.
func (s *Store) EmitDenials(ctx context.Context, denials []global.Denial) error {
	rows, skipped := denialRows(denials)
	if len(rows) == 0 {
		return skipped.err()
	}
	err := s.do(ctx, OpEmitDenials, func(ctx context.Context, t *tally) error {
		for chunk := range slices.Chunk(rows, s.cfg.ChunkRows) {
			args := make([]any, 0, 10*len(chunk))
			for _, r := range chunk {
				c := r.Cell
				args = append(args, r.key.hash[:], r.key.durationMS, r.key.seq,
					[]byte(c.Workspace), []byte(c.Namespace), []byte(c.Identifier), r.Limit, r.Usage, []byte(r.Region), r.ExpiresAt)
			}
			if _, err := exec(ctx, t, s.db, s.q.denials.statement(len(chunk)), args...); err != nil {
				return err
			}
			t.rows += len(chunk)
		}
		return nil
	})
	return errors.Join(err, skipped.err())
}

// denialRows returns the rows to write: the first denial of each cell that
// can be stored, sorted by primary key; and the denials left out.
func denialRows(denials []global.Denial) ([]denialRow, skips) {
	var skipped skips
	rows := make([]denialRow, 0, len(denials))
	for _, d := range denials {
		p := cellProblem(d.Cell)
		if p == "" && len(d.Region) > MaxRegionBytes {
			p = fmt.Sprintf("region is longer than %d bytes", MaxRegionBytes)
		}
		if p != "" {
			skipped.add(p)
			continue
		}
		rows = append(rows, denialRow{key: keyOf(d.Cell), Denial: d})
	}
	// A stable sort keeps the first denial of a cell first; Compact keeps it.
	slices.SortStableFunc(rows, func(a, b denialRow) int { return a.key.compare(b.key) })
	return slices.CompactFunc(rows, func(a, b denialRow) bool { return a.key == b.key }), skipped
}

// Denials implements [global.Store]. Like Pull, in one statement it reads
// the rows of other regions created after the cursor that are still active
// at now, and the database clock at the statement's start; the cursor it
// returns is the clock minus Config.CursorOverlap. Like pulls, most reads
// are recent (see recentReads): they read from the last read's clock less
// a second, and return the cursor passed in. With Config.ReadDSN it reads
// the replica, and the cursor is bounded as Pull's is.
func (s *Store) Denials(ctx context.Context, region string, cursor global.Cursor, now int64) ([]global.Denial, global.Cursor, error) {
	if err := checkRegion(region); err != nil {
		return nil, cursor, err
	}
	r := read{witness: s.rq.witness}
	from, whole := s.denied.from(region, cursor, now, s.cfg.CursorOverlap)
	err := s.do(ctx, OpDenials, func(ctx context.Context, t *tally) error {
		return r.run(ctx, t, s.reads, s.rq.denials, cursorTime(int64(from)), now, []byte(region))
	})
	if err != nil {
		return nil, cursor, err
	}
	return r.denials, s.denied.next(region, cursor, whole, false, now, r.clock, r.bound(from, s.cfg.CursorOverlap)), nil
}
