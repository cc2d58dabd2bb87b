package mysql

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/origin"
)

// TestCompaction: Cleanup merges a region's rows older than compactAge
// into one row of the next level when there are compactFanout of them or
// more, keeping the highest count of each cell; it leaves fewer rows, rows
// of short windows and rows that do not decode as they are; a pull from
// the start reads the same entries before and after.
func TestCompaction(t *testing.T) {
	s := openStore(t, Config{})
	wall := time.Now().UnixMilli()
	day := func(id string) origin.Cell {
		return origin.Cell{Key: origin.Key{Workspace: "ws", Namespace: "ns", Identifier: id, Duration: 24 * time.Hour},
			Sequence: wall / (24 * time.Hour).Milliseconds()}
	}
	x, y, z := day("x"), day("y"), day("z")
	minute := testCell("short", wall/60_000)
	publish := func(region string, counts ...global.Count) {
		t.Helper()
		must(t, s.Publish(ctx, region, counts, wall))
	}
	count := func(c origin.Cell, n int64) global.Count {
		return global.Count{Cell: c, Count: n, ExpiresAt: cellExpiresAt(c)}
	}
	for i := range int64(compactFanout + 2) { // region a: x rises each round, y once
		publish("a", count(x, i+1), count(y, 5), count(minute, i+1))
	}
	for i := range int64(compactFanout - 1) { // region b: too few rows to merge
		publish("b", count(z, i+1))
	}
	bad := encodeBatch([]global.Count{count(x, 99)})
	bad.payload[0] = batchFormat + 1 // a newer format
	_, err := s.db.Exec(s.q.batches.statement(1), []byte("a"), bad.cells, bad.payload, bad.expiresAt)
	must(t, err)
	before := pullEntries(t, s, wall)
	_, err = s.db.Exec(fmt.Sprintf("UPDATE %sbatches SET changed_at = changed_at - INTERVAL 10 MINUTE", s.cfg.TablePrefix))
	must(t, err)

	n, err := s.Cleanup(ctx, wall, 1000)
	must(t, err)
	if n != compactFanout+2 {
		t.Fatalf("Cleanup deleted %d rows, want the %d of region a that decode", n, compactFanout+2)
	}
	levels := map[string]int{}
	rows, err := s.db.Query(fmt.Sprintf("SELECT region, level, COUNT(*) FROM %sbatches GROUP BY region, level", s.cfg.TablePrefix))
	must(t, err)
	for rows.Next() {
		var region string
		var level, count int
		must(t, rows.Scan(&region, &level, &count))
		levels[fmt.Sprintf("%s/%d", region, level)] = count
	}
	must(t, errorsOf(rows))
	if want := map[string]int{"a/0": 1, "a/1": 1, "b/0": compactFanout - 1}; fmt.Sprint(levels) != fmt.Sprint(want) {
		t.Fatalf("rows by region/level %v, want %v (a's merged row, its undecodable row, b's rows)", levels, want)
	}
	after := pullEntries(t, s, wall)
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("entries after compaction %v, want %v", after, before)
	}
	if n, err := s.Cleanup(ctx, wall, 1000); err != nil || n != 0 {
		t.Fatalf("a second Cleanup = %d, %v; want nothing to merge", n, err)
	}
}

// pullEntries pulls every entry active at now, as "reader".
func pullEntries(t *testing.T, s *Store, now int64) map[string]int64 {
	t.Helper()
	p, err := s.Pull(ctx, "reader", 0, now, 60_000)
	must(t, err)
	out := map[string]int64{}
	for _, e := range p.Entries {
		out[e.Region+"/"+e.Cell.Identifier] = e.Count
	}
	return out
}

// TestCleanupDrainsLegacyRows: Cleanup deletes the expired rows of the
// per-entry counters table that earlier releases wrote, and goes on when
// that table was dropped.
func TestCleanupDrainsLegacyRows(t *testing.T) {
	s := openStore(t, Config{})
	legacy := s.cfg.TablePrefix + "counters"
	_, err := s.db.Exec("INSERT INTO "+legacy+" (id_hash, duration_ms, seq, region, workspace, namespace, identifier, count, expires_at, changed_at) "+
		"VALUES (?, 60000, 1, 'a', 'w', 'n', 'i', 3, ?, UTC_TIMESTAMP(6))", make([]byte, 32), now-1)
	must(t, err)
	if n, err := s.Cleanup(ctx, now, 100); err != nil || n != 1 {
		t.Fatalf("Cleanup = %d, %v; want the legacy row deleted", n, err)
	}
	_, err = s.db.Exec("DROP TABLE " + legacy)
	must(t, err)
	if n, err := s.Cleanup(ctx, now, 100); err != nil || n != 0 {
		t.Fatalf("Cleanup without the legacy table = %d, %v; want 0, nil", n, err)
	}
}

// TestCompactionLeavesUndecodableGroups: a (region, level) with enough old
// rows of which fewer than two decode merges nothing, ends its transaction,
// and lets Cleanup go on at once.
func TestCompactionLeavesUndecodableGroups(t *testing.T) {
	s := openStore(t, Config{})
	wall := time.Now().UnixMilli()
	c := origin.Cell{Key: origin.Key{Workspace: "ws", Namespace: "ns", Identifier: "x", Duration: 24 * time.Hour},
		Sequence: wall / (24 * time.Hour).Milliseconds()}
	good := encodeBatch([]global.Count{{Cell: c, Count: 1, ExpiresAt: cellExpiresAt(c)}})
	for i := range compactFanout {
		payload := good.payload
		if i > 0 {
			payload = append([]byte{batchFormat + 1}, good.payload[1:]...) // a newer format
		}
		_, err := s.db.Exec(s.q.batches.statement(1), []byte("a"), good.cells, payload, good.expiresAt)
		must(t, err)
	}
	_, err := s.db.Exec(fmt.Sprintf("UPDATE %sbatches SET changed_at = changed_at - INTERVAL 10 MINUTE", s.cfg.TablePrefix))
	must(t, err)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	for range 2 {
		if n, err := s.Cleanup(ctx, wall, 100); err != nil || n != 0 {
			t.Fatalf("Cleanup = %d, %v; want nothing merged, at once", n, err)
		}
	}
}
