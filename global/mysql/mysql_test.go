package mysql

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/global/globaltest"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
)

// TestConformance runs the global.Store suite with a 1µs cursor overlap:
// the suite's calls never overlap in time, so no cell is reported again.
func TestConformance(t *testing.T) {
	globaltest.Run(t, func(t *testing.T) global.Store {
		return openStore(t, Config{CursorOverlap: time.Microsecond})
	})
}

var ctx = context.Background()

// view is what a pull's entries tell a region of one cell.
type view = globaltest.Sum

func testCell(id string, seq int64) origin.Cell {
	return origin.Cell{Key: origin.Key{Workspace: "ws", Namespace: "ns", Identifier: id, Duration: time.Minute}, Sequence: seq}
}

const now = globaltest.Now

var seq = now/time.Minute.Milliseconds() + 1

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		bad  bool
	}{
		{"zero", Config{}, false},
		{"all set", Config{TablePrefix: "g_", Timeout: time.Second, CursorOverlap: time.Second, ChunkRows: MaxChunkRows, MigrationWait: time.Second, Breaker: BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenProbes: 2}}, false},
		{"prefix with a quote", Config{TablePrefix: "x`; DROP"}, true},
		{"prefix too long", Config{TablePrefix: strings.Repeat("p", 33)}, true},
		{"negative timeout", Config{Timeout: -1}, true},
		{"overlap under 1µs", Config{CursorOverlap: time.Nanosecond}, true},
		{"negative overlap", Config{CursorOverlap: -time.Second}, true},
		{"chunk too big", Config{ChunkRows: MaxChunkRows + 1}, true},
		{"negative chunk", Config{ChunkRows: -1}, true},
		{"negative migration wait", Config{MigrationWait: -1}, true},
		{"negative open timeout", Config{Breaker: BreakerConfig{OpenTimeout: -1}}, true},
		{"read DSN", Config{ReadDSN: "reader:secret@tcp(replica:3306)/sluice"}, false},
		{"read DSN that does not parse", Config{ReadDSN: "reader:secret@tcp(replica:3306)"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err != nil) != tc.bad || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
				t.Fatalf("Validate() = %v, want error: %v", err, tc.bad)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Fatalf("Validate() quotes the DSN's password: %v", err)
			}
		})
	}
}

func TestOpenRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, dsn string
		cfg       Config
	}{
		{"bad DSN", "tcp(::", Config{}},
		{"bad config", "root@tcp(127.0.0.1:1)/test", Config{ChunkRows: -1}},
		{"bad read DSN", "root@tcp(127.0.0.1:1)/test", Config{ReadDSN: "tcp(::"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Open(ctx, tc.dsn, tc.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Open: %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// TestInvalidInput: a region or batch the store cannot record fails the
// call before touching the network (no call is observed).
func TestInvalidInput(t *testing.T) {
	rec := &recorder{}
	s := openStore(t, Config{Observer: rec})
	long := strings.Repeat("r", MaxRegionBytes+1)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"publish region too long", func() error { return s.Publish(ctx, long, nil, now) }},
		{"announce region too long", func() error { return s.Announce(ctx, long, now) }},
		{"pull region too long", func() error { _, err := s.Pull(ctx, long, 0, now, 1); return err }},
		{"denials region too long", func() error { _, _, err := s.Denials(ctx, long, 0, now); return err }},
		{"cleanup batch 0", func() error { _, err := s.Cleanup(ctx, now, 0); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("got %v, want ErrInvalidInput", err)
			}
		})
	}
	if n := len(rec.outcomes()); n != 0 {
		t.Fatalf("invalid calls were sent: %v", rec.outcomes())
	}
}

// TestInvalidCellsSkipped: cells the store cannot record exactly are left
// out, the others written, and the call says how many it left out.
func TestInvalidCellsSkipped(t *testing.T) {
	s := openStore(t, Config{})
	good := testCell("good", seq)
	odd, zero, wide := testCell("odd", seq), testCell("zero", seq), testCell(strings.Repeat("x", MaxFieldBytes+1), seq)
	odd.Duration, zero.Duration = 1500*time.Microsecond, 0
	exp := now + 60_000
	var counts []global.Count
	var denials []global.Denial
	for _, c := range []origin.Cell{odd, good, zero, wide} {
		counts = append(counts, global.Count{Cell: c, Count: 1, ExpiresAt: exp})
		denials = append(denials, global.Denial{Cell: c, Limit: 1, Region: "a", ExpiresAt: exp})
	}
	denials = append(denials, global.Denial{Cell: testCell("other", seq), Region: strings.Repeat("r", MaxRegionBytes+1), ExpiresAt: exp})
	for _, tc := range []struct {
		name, want string
		call       func() error
	}{
		{"publish", "3 rows not written", func() error { return s.Publish(ctx, "a", counts, now) }},
		{"emit denials", "4 rows not written", func() error { return s.EmitDenials(ctx, denials) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalidInput saying %q", err, tc.want)
			}
		})
	}
	p, err := s.Pull(ctx, "b", 0, now, 1000)
	if err != nil || len(p.Entries) != 1 || p.Entries[0].Cell != good {
		t.Fatalf("pulled %v, %v; want the valid cell only", p.Entries, err)
	}
	ds, _, err := s.Denials(ctx, "b", 0, now)
	if err != nil || len(ds) != 1 || ds[0].Cell != good {
		t.Fatalf("denials %v, %v; want the valid cell only", ds, err)
	}
}

// dbClock reads the database clock in microseconds.
func dbClock(t *testing.T, s *Store) int64 {
	t.Helper()
	var c int64
	if err := s.db.QueryRow("SELECT " + clockExpr).Scan(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCursorOverlap: the cursor trails the database clock by the overlap,
// so a cell changed within it is reported again; once the overlap has
// passed, it is not.
func TestCursorOverlap(t *testing.T) {
	const overlap = 300 * time.Millisecond
	s := openStore(t, Config{CursorOverlap: overlap})
	c := testCell("x", seq)
	if err := s.Publish(ctx, "a", []global.Count{{Cell: c, Count: 3, ExpiresAt: now + 60_000}}, now); err != nil {
		t.Fatal(err)
	}
	before := dbClock(t, s)
	p, err := s.Pull(ctx, "b", 0, now, 1000)
	if err != nil || len(p.Entries) != 1 {
		t.Fatalf("first pull: %v, %v", p.Entries, err)
	}
	after := dbClock(t, s)
	if lo, hi := before-overlap.Microseconds(), after-overlap.Microseconds(); int64(p.Next) < lo || int64(p.Next) > hi {
		t.Fatalf("cursor %d, want the clock minus the overlap, in [%d, %d]", p.Next, lo, hi)
	}
	again, err := s.Pull(ctx, "b", p.Next, now, 1000)
	if err != nil || len(again.Entries) != 1 {
		t.Fatalf("a pull within the overlap reports the cell again: %v, %v", again.Entries, err)
	}
	time.Sleep(overlap + 50*time.Millisecond)
	mid, err := s.Pull(ctx, "b", p.Next, now, 1000)
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.Pull(ctx, "b", mid.Next, now, 1000)
	if err != nil || len(last.Entries) != 0 {
		t.Fatalf("a pull after the overlap: %v, %v; want nothing", last.Entries, err)
	}
}

// TestPublishChunks: a publish packs its cells ChunkRows to a row, all its
// rows in one statement (the region is announced apart), and all of them
// arrive; a publish with nothing to write sends nothing.
func TestPublishChunks(t *testing.T) {
	rec := &recorder{}
	s := openStore(t, Config{ChunkRows: 7, Observer: rec})
	if err := s.Publish(ctx, "a", []global.Count{{Cell: testCell("zero", seq), ExpiresAt: now + 60_000}}, now); err != nil {
		t.Fatal(err)
	}
	var counts []global.Count
	for i := range 20 {
		counts = append(counts, global.Count{Cell: testCell(fmt.Sprint(i), seq), Count: int64(i + 1), ExpiresAt: now + 60_000})
	}
	if err := s.Publish(ctx, "a", counts, now); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	calls := slices.Clone(rec.calls)
	rec.mu.Unlock()
	if len(calls) != 1 {
		t.Fatalf("observed %d calls, want 1 (a publish of no positive count sends nothing): %+v", len(calls), calls)
	}
	if got := calls[0]; got.Op != OpPublish || got.Outcome != OutcomeOK || got.Statements != 1 || got.Rows != 3 || got.Cells != 20 {
		t.Fatalf("observed %+v, want publish ok with 1 statement, 3 rows (of 7, 7 and 6 cells) and 20 cells", got)
	}
	p, err := s.Pull(ctx, "b", 0, now, 1000)
	if err != nil || len(p.Entries) != 20 {
		t.Fatalf("pulled %d cells, %v; want 20", len(p.Entries), err)
	}
}

// TestStatementsSplitByPayload: a publish's rows go in as few INSERTs as
// keep each under maxStatementPayload bytes of payload and a page's rows, a
// row too large for that alone in its own.
func TestStatementsSplitByPayload(t *testing.T) {
	rows := func(sizes ...int) []batch {
		var bs []batch
		for _, n := range sizes {
			bs = append(bs, batch{payload: make([]byte, n)})
		}
		return bs
	}
	const limit = maxStatementPayload
	for _, tc := range []struct {
		name    string
		sizes   []int
		maxRows int
		want    []int // rows per statement
	}{
		{"none", nil, 10, nil},
		{"one", []int{10}, 10, []int{1}},
		{"all in one", []int{limit / 2, limit / 2}, 10, []int{2}},
		{"over: two", []int{limit / 2, limit/2 + 1}, 10, []int{1, 1}},
		{"a large row alone", []int{10, limit + 1, 10}, 10, []int{1, 1, 1}},
		{"three", []int{limit / 3, limit / 3, limit / 3, limit / 3, 1}, 10, []int{3, 2}},
		{"a page's rows at most", []int{1, 1, 1, 1, 1}, 2, []int{2, 2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			for _, stmt := range statements(rows(tc.sizes...), tc.maxRows) {
				got = append(got, len(stmt))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("rows per statement %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSortedCountsSortsAndMerges(t *testing.T) {
	x, y := testCell("x", seq), testCell("y", seq)
	rows, skipped := sortedCounts([]global.Count{
		{Cell: y, Count: 1, ExpiresAt: 5},
		{Cell: x, Count: 4, ExpiresAt: 9},
		{Cell: testCell("zero", seq), Count: 0},
		{Cell: y, Count: 3, ExpiresAt: 2},
		{Cell: x, Count: 2, ExpiresAt: 10},
	})
	if err := skipped.err(); err != nil {
		t.Fatal(err)
	}
	want := map[origin.Cell][2]int64{x: {4, 10}, y: {3, 5}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, r := range rows {
		if w := want[r.Cell]; w != [2]int64{r.Count, r.ExpiresAt} {
			t.Fatalf("row %v = (%d, %d), want %v", r.Cell.Identifier, r.Count, r.ExpiresAt, w)
		}
		if i > 0 && compareCells(rows[i-1].Cell, r.Cell) >= 0 {
			t.Fatalf("cells not in order at %d", i)
		}
	}
}

func TestDenialRowsKeepFirst(t *testing.T) {
	x, y := testCell("x", seq), testCell("y", seq)
	rows, skipped := denialRows([]global.Denial{{Cell: y, Limit: 1}, {Cell: x, Limit: 2}, {Cell: y, Limit: 3}, {Cell: x, Limit: 4}})
	if err := skipped.err(); err != nil {
		t.Fatal(err)
	}
	got := map[origin.Cell]int64{}
	for _, r := range rows {
		got[r.Cell] = r.Limit
	}
	if len(rows) != 2 || got[x] != 2 || got[y] != 1 {
		t.Fatalf("rows %v, want x:2 y:1", got)
	}
}

// TestCleanupLock: while another session holds the cleanup lock, Cleanup
// returns 0 at once and deletes nothing; afterwards it does the work and
// leaves the lock free.
func TestCleanupLock(t *testing.T) {
	s := openStore(t, Config{})
	expired := testCell("old", 10)
	if err := s.Publish(ctx, "a", []global.Count{{Cell: expired, Count: 1, ExpiresAt: 12 * 60_000}}, now); err != nil {
		t.Fatal(err)
	}
	holder, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := getLock(ctx, holder, s.cleanup, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if n, err := s.Cleanup(ctx, now, 100); n != 0 || err != nil {
		t.Fatalf("Cleanup while the lock is held = %d, %v; want 0, nil", n, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Cleanup waited %v for a held lock", d)
	}
	if err := releaseLock(holder, s.cleanup); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Cleanup(ctx, now, 100); n != 1 || err != nil {
		t.Fatalf("Cleanup after release = %d, %v; want 1", n, err)
	}
	var free int
	if err := s.db.QueryRow("SELECT IS_FREE_LOCK(?)", s.cleanup).Scan(&free); err != nil || free != 1 {
		t.Fatalf("cleanup lock after Cleanup: IS_FREE_LOCK = %d, %v", free, err)
	}
}

func TestClosedStore(t *testing.T) {
	rec := &recorder{}
	s := openStore(t, Config{Observer: rec})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Pull(ctx, "a", 0, now, 1)
	if !errors.Is(err, ErrClosed) || !errors.Is(err, global.ErrUnavailable) {
		t.Fatalf("Pull after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if len(rec.outcomes()) != 0 {
		t.Fatalf("calls after Close were observed: %v", rec.outcomes())
	}
}

// TestNewKeepsCallersPool: a Store made by New leaves the pool to its
// owner.
func TestNewKeepsCallersPool(t *testing.T) {
	db := testDB(t, testenv.MySQLDSN(t))
	s, err := New(ctx, db, Config{TablePrefix: newPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(); err != nil {
		t.Fatalf("the caller's pool after Store.Close: %v", err)
	}
}

// TestDriverDefaults: Open's driver options fill what the DSN leaves unset
// and keep what it sets (except interpolateParams, which it always needs).
func TestDriverDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, dsn string
		want      string // timeout/readTimeout/writeTimeout/lock wait
	}{
		{"unset", "root@tcp(127.0.0.1:3306)/test", "5s/30s/30s/2"},
		{"set", "root@tcp(127.0.0.1:3306)/test?timeout=1s&readTimeout=2s&writeTimeout=3s&innodb_lock_wait_timeout=7", "1s/2s/3s/7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dc, err := mysqldriver.ParseDSN(tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			withDriverDefaults(dc)
			got := fmt.Sprintf("%v/%v/%v/%s", dc.Timeout, dc.ReadTimeout, dc.WriteTimeout, dc.Params["innodb_lock_wait_timeout"])
			if got != tc.want || !dc.InterpolateParams {
				t.Fatalf("got %s (interpolateParams %v), want %s", got, dc.InterpolateParams, tc.want)
			}
		})
	}
}

// TestLateCommit: a publish whose statement started before a pull but
// committed after it is read by the next pull when the overlap covers the
// delay, and missed when it does not; this is what CursorOverlap is for.
func TestLateCommit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		overlap time.Duration
		read    bool
	}{
		{"overlap covers the delay", 5 * time.Second, true},
		{"overlap shorter than the delay", time.Microsecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, Config{CursorOverlap: tc.overlap})
			c := testCell("late", seq)
			b := encodeBatch([]global.Count{{Cell: c, Count: 5, ExpiresAt: now + 60_000}})
			tx, err := s.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.Exec(s.q.batches.statement(1), []byte("a"), b.cells, b.payload, b.expiresAt); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // the pull's clock is past the write's
			p, err := s.Pull(ctx, "b", 0, now, 1000)
			if err != nil || len(p.Entries) != 0 {
				t.Fatalf("pull before the commit: %v, %v", p.Entries, err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			next, err := s.Pull(ctx, "b", p.Next, now, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(next.Entries) == 1; got != tc.read {
				t.Fatalf("pull after the commit reports %v, want the cell: %v", next.Entries, tc.read)
			}
		})
	}
}

// TestPullPages: where more rows were written after the cursor than a
// page (PageRows cells in rows of ChunkRows), a pull reads the oldest page
// of them and returns a cursor before the last one's change, and the pulls
// that follow read the rest, a page each, until one reads nothing. Every
// entry is read once at least: each cell's entries, read in whichever
// pages, add up to its regions' counts.
func TestPullPages(t *testing.T) {
	const pageRows, chunkRows = 8, 4 // a page is 2 rows
	s := openStore(t, Config{PageRows: pageRows, ChunkRows: chunkRows, CursorOverlap: time.Microsecond})
	want := map[origin.Cell]int64{}
	publish := func(region string, counts ...global.Count) {
		t.Helper()
		if err := s.Publish(ctx, region, counts, now); err != nil {
			t.Fatal(err)
		}
	}
	var rows int
	for i := range 35 { // a row each; every fifth cell has an older row of region c
		c := testCell(fmt.Sprintf("page-%02d", i), seq)
		want[c] = int64(i + 1)
		if i%5 == 0 {
			publish("c", global.Count{Cell: c, Count: 100, ExpiresAt: now + 60_000})
			want[c], rows = want[c]+100, rows+1
		}
		publish("a", global.Count{Cell: c, Count: int64(i + 1), ExpiresAt: now + 60_000})
		rows++
	}
	var batch []global.Count // 3 rows in statements of a page's 2 rows at most
	for i := range 10 {
		c := testCell(fmt.Sprintf("chunk-%02d", i), seq)
		want[c] = 7
		batch = append(batch, global.Count{Cell: c, Count: 7, ExpiresAt: now + 60_000})
	}
	publish("a", batch...)
	rows += 3

	entries := map[global.Entry]int64{} // the highest count read of each (cell, region)
	var cursor global.Cursor
	pulls := 0
	for ; pulls < 100; pulls++ {
		p, err := s.Pull(ctx, "b", cursor, now, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Entries) == 0 {
			break
		}
		if len(p.Entries) > 2*chunkRows {
			t.Fatalf("pull %d read %d cells, want at most a page of 2 rows", pulls, len(p.Entries))
		}
		if p.Next <= cursor {
			t.Fatalf("pull %d: cursor %d does not move on from %d", pulls, p.Next, cursor)
		}
		for _, e := range p.Entries {
			k := global.Entry{Cell: e.Cell, Region: e.Region}
			entries[k] = max(entries[k], e.Count)
		}
		cursor = p.Next
	}
	got := map[origin.Cell]int64{}
	for k, n := range entries {
		got[k.Cell] += n
	}
	if pulls < rows/2 {
		t.Errorf("%d pulls read %d rows: want pages of 2", pulls, rows)
	}
	for c, n := range want {
		if got[c] != n {
			t.Errorf("%s: read %d, want %d", c.Identifier, got[c], n)
		}
	}
}

// TestPullPagesOnlyFromAnOldCursor: a pull from a cursor within the overlap
// and pagedAfter of now reads every changed cell at once, however many;
// from an older cursor it reads a page.
func TestPullPagesOnlyFromAnOldCursor(t *testing.T) {
	const pageRows = 10 // two rows of 5 cells
	s := openStore(t, Config{PageRows: pageRows, ChunkRows: 5})
	wall := time.Now().UnixMilli()
	var counts []global.Count
	for i := range 25 {
		counts = append(counts, global.Count{Cell: testCell(fmt.Sprintf("recent-%02d", i), wall/60_000), Count: 5, ExpiresAt: wall + 120_000})
	}
	if err := s.Publish(ctx, "a", counts, wall); err != nil {
		t.Fatal(err)
	}
	clock := dbClock(t, s)
	for _, tc := range []struct {
		name  string
		since time.Duration // the cursor, before the database clock
		want  int
	}{
		{"recent cursor: every cell", 10 * time.Second, 25},
		{"old cursor: a page", DefaultCursorOverlap + pagedAfter + time.Minute, pageRows},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := s.Pull(ctx, "b", global.Cursor(clock-tc.since.Microseconds()), wall, 1000)
			if err != nil || len(p.Entries) != tc.want {
				t.Fatalf("pull: %d cells, %v; want %d", len(p.Entries), err, tc.want)
			}
		})
	}
}
