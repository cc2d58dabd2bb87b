package mysql

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/origin"
)

// Compaction keeps what a new leader reads to catch up short when windows
// are long: a counter of a day-long window that changes every round would
// otherwise leave a row a second per region, all read by every first pull.
// Cleanup merges, for each region and level, compactFanout or more rows
// written over compactAge ago and active for compactAge more into rows of
// the next level: the highest count of each cell, its expired cells left
// out. A region's old rows so stay at most about compactFanout per level,
// levels growing with the logarithm of a window's rounds. Windows shorter
// than about compactAge expire before they are old enough to merge, and
// cost nothing.
//
// A merge is one transaction (its reads, the merged rows' INSERT, the
// merged rows' DELETE), so a reader sees the old rows or the new ones, never
// neither; the new rows are written now, so every region reads them once
// more. A row whose payload does not decode (a newer format) is left as it
// is.
const (
	compactAge    = 5 * time.Minute
	compactFanout = 8
	compactRows   = 256 // rows merged at most per (region, level) and call
	compactGroups = 16  // (region, level) merged at most per call
)

// compactionQueries are Cleanup's compaction statements.
type compactionQueries struct {
	groups, rows string // the (region, level) to merge; one's rows
	insert       batchInsert
	deleteHead   string // then the ids, comma-separated, and ")"
}

func newCompactionQueries(r *strings.Replacer) compactionQueries {
	const old = `FROM {p}batches FORCE INDEX ({p}batches_changed_at)
WHERE changed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AND expires_at > ?`
	return compactionQueries{
		// groups takes compactAge (µs), now + compactAge (ms), compactFanout, compactGroups.
		groups: r.Replace("SELECT region, level, COUNT(*) " + old +
			" GROUP BY region, level HAVING COUNT(*) >= ? LIMIT ?"),
		// rows takes compactAge (µs), now + compactAge (ms), region, level, compactRows.
		rows: r.Replace("SELECT id, payload " + old +
			" AND region = ? AND level = ? ORDER BY changed_at LIMIT ?"),
		insert: batchInsert{
			head: r.Replace("INSERT INTO {p}batches (region, cells, payload, expires_at, level, changed_at) VALUES "),
			row:  "(?, ?, ?, ?, ?, UTC_TIMESTAMP(6))",
		},
		deleteHead: r.Replace("DELETE FROM {p}batches WHERE id IN ("),
	}
}

// compactGroup is a (region, level) whose old rows Cleanup merges.
type compactGroup struct {
	region []byte
	level  int
}

// compact merges the old rows of each (region, level) that has enough of
// them (see compactFanout), on conn, adding the rows it deletes to t.rows.
func (s *Store) compact(ctx context.Context, t *tally, conn *sql.Conn, now int64) error {
	q := s.q.compaction
	age, live := compactAge.Microseconds(), now+compactAge.Milliseconds()
	t.statements++
	rows, err := conn.QueryContext(ctx, q.groups, age, live, compactFanout, compactGroups)
	if err != nil {
		return err
	}
	var groups []compactGroup
	for rows.Next() {
		var g compactGroup
		var n int
		if err := rows.Scan(&g.region, &g.level, &n); err != nil {
			rows.Close()
			return err
		}
		groups = append(groups, g)
	}
	if err := errorsOf(rows); err != nil {
		return err
	}
	for _, g := range groups {
		if err := s.merge(ctx, t, conn, g, now); err != nil {
			return err
		}
	}
	return nil
}

// errorsOf closes rows and returns the error that ended their reading.
func errorsOf(rows *sql.Rows) error {
	err := rows.Err()
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return err
}

// merge merges g's old rows, in one transaction on conn.
func (s *Store) merge(ctx context.Context, t *tally, conn *sql.Conn, g compactGroup, now int64) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // after Commit, ErrTxDone: nothing to undo
	ids, counts, err := s.readOld(ctx, t, tx, g, now)
	if err != nil || len(ids) < 2 {
		return err
	}
	// No statement is sent again after a deadlock, as exec would: InnoDB
	// rolls the whole transaction back, and the next Cleanup merges again.
	for _, stmt := range statements(packBatches(counts, s.cfg.ChunkRows), s.pageBatches()) {
		args := make([]any, 0, 5*len(stmt))
		for _, b := range stmt {
			args = append(args, g.region, b.cells, b.payload, b.expiresAt, g.level+1)
		}
		t.statements++
		if _, err := tx.ExecContext(ctx, s.q.compaction.insert.statement(len(stmt)), args...); err != nil {
			return err
		}
	}
	del := s.q.compaction.deleteHead + strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",") + ")"
	t.statements++
	if _, err := deleted(t)(tx.ExecContext(ctx, del, ids...)); err != nil {
		return err
	}
	t.statements++
	return tx.Commit()
}

// readOld reads g's old rows in tx and returns the ids of those that
// decode and their cells' highest counts, sorted by compareCells.
func (s *Store) readOld(ctx context.Context, t *tally, tx *sql.Tx, g compactGroup, now int64) ([]any, []global.Count, error) {
	t.statements++
	rows, err := tx.QueryContext(ctx, s.q.compaction.rows, compactAge.Microseconds(),
		now+compactAge.Milliseconds(), g.region, g.level, compactRows)
	if err != nil {
		return nil, nil, err
	}
	var ids []any
	merged := map[origin.Cell]int64{}
	for rows.Next() {
		var id uint64
		var payload []byte
		if err := rows.Scan(&id, &payload); err != nil {
			rows.Close()
			return nil, nil, err
		}
		cells := map[origin.Cell]int64{}
		if decodeBatch(payload, now, func(c origin.Cell, n int64) { cells[c] = max(cells[c], n) }) != nil {
			s.log.Warn("global/mysql: a batch row does not decode; compaction leaves it", "id", id, "region", string(g.region))
			continue
		}
		for c, n := range cells {
			merged[c] = max(merged[c], n)
		}
		ids = append(ids, id)
	}
	if err := errorsOf(rows); err != nil {
		return nil, nil, err
	}
	counts := make([]global.Count, 0, len(merged))
	for c, n := range merged {
		counts = append(counts, global.Count{Cell: c, Count: n, ExpiresAt: cellExpiresAt(c)})
	}
	slices.SortFunc(counts, func(a, b global.Count) int { return compareCells(a.Cell, b.Cell) })
	return ids, counts, nil
}
