package mysql

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/global"
)

// TestReadCursor: the cursor a read returns, with explicit times (µs of
// the primary's clock). On the primary it is the clock minus the overlap;
// on a replica the witness (the newest row it shows) minus the overlap,
// never before the cursor read from; after a full page, the instant before
// the page's last change when that is earlier.
func TestReadCursor(t *testing.T) {
	const (
		t0      = int64(1_800_000_000_000_000) // µs
		second  = int64(time.Second / time.Microsecond)
		overlap = 5 * time.Second
		page    = 100
	)
	for _, tc := range []struct {
		name     string
		witness  bool  // read on a replica
		clock    int64 // the clock, or the witness
		cursor   int64 // the cursor read from
		pageRows int64 // rows of the read's page (page: full)
		pageLast int64
		want     int64
	}{
		{name: "primary: the clock minus the overlap", clock: t0, cursor: t0 - 10*second, want: t0 - 5*second},
		{name: "primary: the zero cursor", clock: t0, want: t0 - 5*second},
		{name: "primary: a clock within the overlap of the epoch", clock: second, want: 0},
		{name: "primary: full page resumes before its last change", clock: t0, cursor: t0 - 60*second,
			pageRows: page, pageLast: t0 - 50*second, want: t0 - 50*second - 1},
		{name: "primary: full page past the overlap stops at the clock minus the overlap", clock: t0, cursor: t0 - 60*second,
			pageRows: page, pageLast: t0 - 2*second, want: t0 - 5*second},
		{name: "primary: full page of one instant goes past it", clock: t0, cursor: t0 - 60*second,
			pageRows: page, pageLast: t0 - 60*second + 1, want: t0 - 60*second + 1},
		{name: "replica: the witness minus the overlap", witness: true, clock: t0, cursor: t0 - 10*second, want: t0 - 5*second},
		{name: "replica: the zero cursor", witness: true, clock: t0, want: t0 - 5*second},
		{name: "replica: paused, the witness has not moved", witness: true, clock: t0, cursor: t0 - 5*second, want: t0 - 5*second},
		{name: "replica: a witness behind the cursor (rows deleted) keeps it", witness: true, clock: t0, cursor: t0 - 2*second, want: t0 - 2*second},
		{name: "replica: empty tables keep the zero cursor", witness: true, clock: 0, want: 0},
		{name: "replica: empty tables keep a cursor", witness: true, clock: 0, cursor: t0, want: t0},
		{name: "replica: a witness within the overlap of the cursor keeps it", witness: true, clock: t0 - 60*second + 3*second,
			cursor: t0 - 60*second, want: t0 - 60*second},
		{name: "replica: full page resumes before its last change", witness: true, clock: t0, cursor: t0 - 60*second,
			pageRows: page, pageLast: t0 - 50*second, want: t0 - 50*second - 1},
		{name: "replica: full page past the witness bound stops at the bound", witness: true, clock: t0, cursor: t0 - 60*second,
			pageRows: page, pageLast: t0 - 2*second, want: t0 - 5*second},
		{name: "replica: full page at the bound, witness unmoved, keeps the cursor", witness: true, clock: t0, cursor: t0 - 5*second,
			pageRows: page, pageLast: t0 - 4*second, want: t0 - 5*second},
		{name: "replica: page not full", witness: true, clock: t0, cursor: t0 - 60*second,
			pageRows: page - 1, pageLast: t0 - 50*second, want: t0 - 5*second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := read{clock: tc.clock, witness: tc.witness, pageRows: tc.pageRows, pageLast: tc.pageLast}
			if got := r.next(global.Cursor(tc.cursor), overlap, page); int64(got) != tc.want {
				t.Fatalf("next = %d, want %d (%+d µs)", got, tc.want, int64(got)-tc.want)
			}
			if tc.pageRows > 0 {
				return
			}
			if got := r.bound(global.Cursor(tc.cursor), overlap); int64(got) != tc.want {
				t.Fatalf("bound (the denials' cursor) = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestReplicaCursorModel checks the argument of witnessExpr on a model of
// a primary and a lagging replica, with explicit times: statements change
// rows at their start and commit up to just under the overlap later, in any
// order; the replica shows them in commit order, after a lag that grows
// and shrinks (pauses included); a reader pulls at random instants with the
// witness's cursor. Every row is read, none skipped; with the replica's
// own clock as the cursor's clock, rows are skipped.
func TestReplicaCursorModel(t *testing.T) {
	const overlap = 50 * time.Millisecond
	ov := overlap.Microseconds()
	for _, tc := range []struct {
		name       string
		maxLag     int64 // µs
		ownClock   bool  // the naive cursor: the replica's clock minus the overlap
		wantMissed bool
	}{
		{"no lag", 0, false, false},
		{"lag under the overlap", ov / 2, false, false},
		{"lag of many overlaps", 20 * ov, false, false},
		{"lag of many overlaps, the replica's clock as the cursor", 20 * ov, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			missed := 0
			for seed := range uint64(20) {
				missed += replicaModel(rand.New(rand.NewPCG(seed, 7)), ov, tc.maxLag, tc.ownClock)
			}
			if (missed > 0) != tc.wantMissed {
				t.Fatalf("%d rows never read over 20 runs; want some missed: %v", missed, tc.wantMissed)
			}
		})
	}
}

// replicaModel runs one model of TestReplicaCursorModel and returns the
// rows the reader never read.
func replicaModel(rng *rand.Rand, overlap, maxLag int64, ownClock bool) int {
	type row struct{ changed, commit, shown int64 }
	rows := make([]row, 400)
	for i := range rows {
		start := int64(i)*1000 + rng.Int64N(1000)
		rows[i] = row{changed: start, commit: start + rng.Int64N(overlap)}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(a.commit, b.commit) })
	shown := int64(0)
	for i := range rows { // in commit order, after a lag that varies
		lag := int64(0)
		if maxLag > 0 {
			lag = rng.Int64N(maxLag)
		}
		shown = max(shown, rows[i].commit+lag)
		rows[i].shown = shown
	}
	seen := make([]bool, len(rows))
	cursor := global.Cursor(0)
	for now := int64(0); now < shown+4*overlap; now += 1 + rng.Int64N(overlap) {
		witness := int64(0)
		for i, r := range rows {
			if r.shown > now {
				continue
			}
			witness = max(witness, r.changed)
			if r.changed > int64(cursor) {
				seen[i] = true
			}
		}
		rd := read{clock: witness, witness: true}
		if ownClock {
			rd = read{clock: now}
		}
		cursor = rd.bound(cursor, time.Duration(overlap)*time.Microsecond)
	}
	missed := 0
	for _, ok := range seen {
		if !ok {
			missed++
		}
	}
	return missed
}

// TestPullAfterStuckPage: on a replica, a pull whose full page could not
// move its cursor (every row after it within the overlap of the witness)
// makes the next pull from that cursor read every change instead of the
// same page, once; nothing else changes the statement of an old cursor.
func TestPullAfterStuckPage(t *testing.T) {
	const (
		nowMS  = int64(1_800_000_000_000)
		second = int64(time.Second / time.Microsecond)
		page   = 10
	)
	cursor := global.Cursor(nowMS*1000 - 60*second) // old: pulls from it page
	for _, tc := range []struct {
		name      string
		witness   bool
		clock     int64 // the clock, or the witness
		pageRows  int64
		from      global.Cursor // the cursor of the pull after
		wantWhole []bool        // the pulls after, from from: a whole read?
	}{
		{"replica: full page, cursor unmoved", true, int64(cursor) + 2*second, page, cursor, []bool{true, false}},
		{"replica: full page, cursor moved", true, int64(cursor) + 20*second, page, cursor, []bool{false}},
		{"replica: page not full", true, int64(cursor) + 2*second, page - 1, cursor, []bool{false}},
		{"replica: full page, cursor unmoved, a pull from another cursor", true, int64(cursor) + 2*second, page, cursor + 1, []bool{false}},
		{"primary: full page", false, int64(cursor) + 2*second, page, cursor, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Store{cfg: Config{PageRows: page, ChunkRows: 1}.withDefaults(), q: newQueries("p_")}
			s.stuck.Store(-1)
			s.rq = s.q.primary
			if tc.witness {
				s.rq = s.q.replica
			}
			r := read{clock: tc.clock, witness: tc.witness, pageRows: tc.pageRows, pageLast: int64(cursor) + second}
			s.pulled(&r, cursor)
			for i, want := range tc.wantWhole {
				query, _, _ := s.pullStatement(s.rq.pull, s.rq.pullPage, "eu", tc.from, nowMS)
				if whole := query == s.rq.pull; whole != want {
					t.Fatalf("pull %d after: a whole read %v, want %v", i+1, whole, want)
				}
			}
		})
	}
}
