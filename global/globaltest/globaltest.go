// Package globaltest is a conformance suite that every [global.Store]
// implementation runs in its own tests.
//
// The suite checks the contract of [global.Store] from the outside: counts
// are G-Counter entries (a lower count never lowers a row), a pull separates
// the caller's region from the others, cursors make pulls incremental, rows
// expire by the caller's clock, denials keep their first row and are read by
// the other regions only, cleanup deletes
// exactly the expired rows, identities are byte-exact and never collide, and
// concurrent publishers from several regions lose nothing.
//
// Cursor checks are exact: a Pull or Denials call made right after another
// must not report a row that did not change in between. The contract allows a
// store to report a row again; a store that does so by design (a cursor with
// a safety overlap) must be configured for the suite so that it does not
// when calls do not overlap in time.
package globaltest

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/origin"
)

// Now is the base of the suite's virtual clock, in Unix ms. Every time the
// suite passes to a store is close to it.
const Now = int64(1_800_000_000_000)

// Open returns a new, empty store for one subtest. The store must see no
// rows, regions or denials of any other store the suite opened; the suite
// closes it.
type Open func(t *testing.T) global.Store

// Run runs every conformance test against stores made by open.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s global.Store)
	}{
		{"OwnAndOthers", testOwnAndOthers},
		{"GreatestNeverLowers", testGreatest},
		{"ZeroCountIsNotAChange", testZeroCount},
		{"DuplicateCellsInOneCall", testDuplicateCells},
		{"CursorReportsOnlyChanges", testCursor},
		{"ExpiryByNow", testExpiry},
		{"Regions", testRegions},
		{"DenialsFirstRowWins", testDenialsFirstWins},
		{"DenialsCursorAndExpiry", testDenialsCursor},
		{"DenialsOfOtherRegionsOnly", testDenialsOthersOnly},
		{"Cleanup", testCleanup},
		{"Identities", testIdentities},
		{"ConcurrentPublishers", testConcurrent},
		{"CanceledContext", testCanceled},
		{"CloseIsIdempotent", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
	for _, tc := range tests {
		t.Run("PullWithDenials/"+tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			both, ok := s.(global.PullerWithDenials)
			if !ok {
				t.Skip("the store does not implement global.PullerWithDenials")
			}
			tc.fn(t, throughBoth{s, both})
		})
	}
}

// throughBoth is a Store whose Pull and Denials are each the half of a
// PullWithDenials, so that every test of the suite checks that each half
// of the combined read answers as the call it stands for.
type throughBoth struct {
	global.Store
	both global.PullerWithDenials
}

func (s throughBoth) Pull(ctx context.Context, region string, cursor global.Cursor, now, activeFor int64) (global.Pull, error) {
	p, _, _, err := s.both.PullWithDenials(ctx, region, cursor, 0, now, activeFor)
	return p, err
}

func (s throughBoth) Denials(ctx context.Context, region string, cursor global.Cursor, now int64) ([]global.Denial, global.Cursor, error) {
	_, ds, next, err := s.both.PullWithDenials(ctx, region, 0, cursor, now, 0)
	if err != nil {
		return nil, cursor, err
	}
	return ds, next, nil
}

// cell returns a cell of a one-minute counter named id in the suite's
// workspace, at sequence seq.
func cell(id string, seq int64) origin.Cell {
	return origin.Cell{Key: origin.Key{Workspace: "ws", Namespace: "ns", Identifier: id, Duration: time.Minute}, Sequence: seq}
}

// expiry returns the ExpiresAt of c, (seq+2)*d.
func expiry(c origin.Cell) int64 {
	return (c.Sequence + 2) * c.Duration.Milliseconds()
}

// active is a sequence whose cells are active around Now for a minute.
var active = Now/time.Minute.Milliseconds() + 1

func count(c origin.Cell, n int64) global.Count {
	return global.Count{Cell: c, Count: n, ExpiresAt: expiry(c)}
}

func publish(t *testing.T, s global.Store, region string, counts ...global.Count) {
	t.Helper()
	if err := s.Publish(context.Background(), region, counts, Now); err != nil {
		t.Fatalf("Publish(%q): %v", region, err)
	}
}

// Sum is what a pull's entries tell a region of one cell: its own
// region's entry and the sum of the other regions' entries.
type Sum struct {
	Cell        origin.Cell
	Own, Others int64
}

// Sums returns the entries summed per cell as region sees them (see Sum).
func Sums(region string, entries []global.Entry) map[origin.Cell]Sum {
	m := make(map[origin.Cell]Sum)
	for _, e := range entries {
		v := m[e.Cell]
		v.Cell = e.Cell
		if e.Region == region {
			v.Own += e.Count
		} else {
			v.Others += e.Count
		}
		m[e.Cell] = v
	}
	return m
}

// imported is a cell's Sum, as the suite's cases spell it.
type imported = Sum

func pull(t *testing.T, s global.Store, region string, cursor global.Cursor) (map[origin.Cell]imported, global.Pull) {
	t.Helper()
	p, err := s.Pull(context.Background(), region, cursor, Now, time.Minute.Milliseconds())
	if err != nil {
		t.Fatalf("Pull(%q, %d): %v", region, cursor, err)
	}
	return byCell(t, region, p.Entries), p
}

// byCell sums entries per cell as region sees them (Sums), failing t if
// an entry is reported twice in one pull.
func byCell(t *testing.T, region string, entries []global.Entry) map[origin.Cell]imported {
	t.Helper()
	seen := make(map[global.Entry]bool, len(entries))
	for _, e := range entries {
		k := global.Entry{Cell: e.Cell, Region: e.Region}
		if seen[k] {
			t.Fatalf("entry of %v in region %q reported twice in one pull", e.Cell, e.Region)
		}
		seen[k] = true
	}
	return Sums(region, entries)
}

// wantCells fails t unless got holds exactly want.
func wantCells(t *testing.T, what string, got map[origin.Cell]imported, want ...imported) {
	t.Helper()
	w := make(map[origin.Cell]imported, len(want))
	for _, c := range want {
		w[c.Cell] = c
	}
	if !maps.Equal(got, w) {
		t.Fatalf("%s:\n got  %v\n want %v", what, sorted(got), sorted(w))
	}
}

func sorted(m map[origin.Cell]imported) []string {
	out := make([]string, 0, len(m))
	for _, c := range m {
		out = append(out, fmt.Sprintf("%q/%d=%d+%d", c.Cell.Identifier, c.Cell.Sequence, c.Own, c.Others))
	}
	slices.Sort(out)
	return out
}

func imp(c origin.Cell, own, others int64) imported {
	return imported{Cell: c, Own: own, Others: others}
}

func testOwnAndOthers(t *testing.T, s global.Store) {
	x, y := cell("x", active), cell("y", active)
	publish(t, s, "a", count(x, 5), count(y, 1))
	publish(t, s, "b", count(x, 7))
	publish(t, s, "c", count(x, 11))
	for _, tc := range []struct {
		region string
		want   []imported
	}{
		{"a", []imported{imp(x, 5, 18), imp(y, 1, 0)}},
		{"b", []imported{imp(x, 7, 16), imp(y, 0, 1)}},
		{"c", []imported{imp(x, 11, 12), imp(y, 0, 1)}},
		{"never published", []imported{imp(x, 0, 23), imp(y, 0, 1)}},
		{"A", []imported{imp(x, 0, 23), imp(y, 0, 1)}}, // regions are case-sensitive
	} {
		t.Run(tc.region, func(t *testing.T) {
			got, _ := pull(t, s, tc.region, 0)
			wantCells(t, "pull", got, tc.want...)
		})
	}
}

func testGreatest(t *testing.T, s global.Store) {
	x := cell("x", active)
	for _, tc := range []struct {
		name       string
		a, b, want int64 // region a publishes a then b
	}{
		{"higher raises", 5, 9, 9},
		{"lower keeps", 9, 3, 9},
		{"equal keeps", 9, 9, 9},
		{"negative keeps", 9, -1, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			publish(t, s, "a", count(x, tc.a))
			publish(t, s, "a", count(x, tc.b))
			got, _ := pull(t, s, "z", 0)
			wantCells(t, "pull", got, imp(x, 0, tc.want))
		})
	}
}

func testZeroCount(t *testing.T, s global.Store) {
	x, y := cell("x", active), cell("y", active)
	publish(t, s, "a", count(x, 0))
	got, _ := pull(t, s, "z", 0)
	wantCells(t, "a cell published with count 0 only", got)
	publish(t, s, "a", count(y, 0), count(y, 4))
	got, _ = pull(t, s, "a", 0)
	wantCells(t, "0 then 4 in one call", got, imp(y, 4, 0))
}

func testDuplicateCells(t *testing.T, s global.Store) {
	x := cell("x", active)
	publish(t, s, "a", count(x, 3), count(x, 8), count(x, 2))
	got, _ := pull(t, s, "b", 0)
	wantCells(t, "one call naming a cell three times", got, imp(x, 0, 8))
}

func testCursor(t *testing.T, s global.Store) {
	x, y, z := cell("x", active), cell("y", active), cell("z", active)
	publish(t, s, "a", count(x, 1), count(y, 2))
	publish(t, s, "b", count(x, 10), count(z, 20))
	got, p := pull(t, s, "a", 0)
	wantCells(t, "zero cursor", got, imp(x, 1, 10), imp(y, 2, 0), imp(z, 0, 20))

	// A store may report an entry again with a count no higher than it
	// holds (orLess): a caller keeps the highest it read of each entry.
	steps := []struct {
		name   string
		region string
		counts []global.Count
		want   []imported
		orLess []imported
	}{
		{"nothing changed", "", nil, nil, nil},
		{"other region raises one cell", "b", []global.Count{count(x, 15)}, []imported{imp(x, 0, 15)}, nil}, // its entry alone
		{"own region raises one cell", "a", []global.Count{count(y, 3)}, []imported{imp(y, 3, 0)}, nil},
		{"lower and equal counts change no entry", "b", []global.Count{count(x, 2), count(z, 20)}, nil, []imported{imp(x, 0, 15), imp(z, 0, 20)}},
		{"new region on an old cell", "c", []global.Count{count(z, 1)}, []imported{imp(z, 0, 1)}, nil},
		{"empty publish", "c", nil, nil, nil},
	}
	for _, st := range steps {
		if st.region != "" {
			publish(t, s, st.region, st.counts...)
		}
		got, next := pull(t, s, "a", p.Next)
		for _, c := range st.orLess {
			if g, ok := got[c.Cell]; ok && g.Own <= c.Own && g.Others <= c.Others {
				delete(got, c.Cell)
			}
		}
		wantCells(t, st.name, got, st.want...)
		p = next
	}
	got, _ = pull(t, s, "a", 0)
	wantCells(t, "zero cursor again", got, imp(x, 1, 15), imp(y, 3, 0), imp(z, 0, 21))
}

func testExpiry(t *testing.T, s global.Store) {
	c := cell("x", 10)
	exp := expiry(c)
	if err := s.Publish(context.Background(), "a", []global.Count{count(c, 4)}, exp-5); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		now    int64
		report bool
	}{
		{"before expiry", exp - 1, true},
		{"at expiry", exp, false},
		{"after expiry", exp + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := s.Pull(context.Background(), "b", 0, tc.now, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(p.Entries) == 1; got != tc.report {
				t.Fatalf("Pull at %d (expires %d) reports %v", tc.now, exp, p.Entries)
			}
		})
	}
}

func testRegions(t *testing.T, s global.Store) {
	ctx := context.Background()
	regions := func(region string, activeFor int64) int {
		t.Helper()
		p, err := s.Pull(ctx, region, 0, Now, activeFor)
		if err != nil {
			t.Fatal(err)
		}
		return p.Regions
	}
	if n := regions("a", 1000); n != 1 {
		t.Fatalf("empty store: Regions = %d, want 1 (self)", n)
	}
	if err := s.Announce(ctx, "b", Now-100); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(ctx, "c", Now-50); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, "c", []global.Count{count(cell("x", active), 1)}, Now-50); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(ctx, "b", Now-5000); err != nil { // older: keeps Now-100
		t.Fatal(err)
	}
	if err := s.Announce(ctx, "a", Now-5000); err != nil { // self, long ago
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		region    string
		activeFor int64
		want      int
	}{
		{"all recent", "a", 1000, 3},
		{"announced region too old", "a", 100, 2},
		{"both too old", "a", 50, 1},
		{"self counted once when recent", "b", 1000, 2},
		{"self counted while too old", "b", 50, 1},
		{"unknown caller", "d", 1000, 3},
		{"unknown caller, window covers all", "d", 10000, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := regions(tc.region, tc.activeFor); n != tc.want {
				t.Fatalf("Regions for %q within %d ms = %d, want %d", tc.region, tc.activeFor, n, tc.want)
			}
		})
	}
}

func denial(c origin.Cell, limit int64, region string) global.Denial {
	return global.Denial{Cell: c, Limit: limit, Usage: limit - 1, Region: region, ExpiresAt: expiry(c)}
}

func emit(t *testing.T, s global.Store, ds ...global.Denial) {
	t.Helper()
	if err := s.EmitDenials(context.Background(), ds); err != nil {
		t.Fatalf("EmitDenials: %v", err)
	}
}

// reader is a region that emits no denial in the suite: it reads every row.
const reader = "reader"

func denials(t *testing.T, s global.Store, region string, cursor global.Cursor, now int64) (map[origin.Cell]global.Denial, global.Cursor) {
	t.Helper()
	ds, next, err := s.Denials(context.Background(), region, cursor, now)
	if err != nil {
		t.Fatalf("Denials(%q, %d, %d): %v", region, cursor, now, err)
	}
	m := make(map[origin.Cell]global.Denial, len(ds))
	for _, d := range ds {
		if _, dup := m[d.Cell]; dup {
			t.Fatalf("denial %v reported twice", d.Cell)
		}
		m[d.Cell] = d
	}
	return m, next
}

func wantDenials(t *testing.T, what string, got map[origin.Cell]global.Denial, want ...global.Denial) {
	t.Helper()
	w := make(map[origin.Cell]global.Denial, len(want))
	for _, d := range want {
		w[d.Cell] = d
	}
	if !maps.Equal(got, w) {
		t.Fatalf("%s:\n got  %v\n want %v", what, got, w)
	}
}

func testDenialsFirstWins(t *testing.T, s global.Store) {
	x, y, x2 := cell("x", active), cell("y", active), cell("x", active+1)
	emit(t, s, denial(x, 10, "a"))
	emit(t, s, denial(x, 20, "b"), denial(y, 5, "b"), denial(y, 6, "c"), denial(x2, 30, "c"))
	got, _ := denials(t, s, reader, 0, Now)
	wantDenials(t, "first row of each cell", got, denial(x, 10, "a"), denial(y, 5, "b"), denial(x2, 30, "c"))
}

func testDenialsCursor(t *testing.T, s global.Store) {
	x, y, old := cell("x", active), cell("y", active+1), cell("old", 5)
	emit(t, s, denial(x, 10, "a"), denial(old, 1, "a"))
	got, cur := denials(t, s, reader, 0, Now)
	wantDenials(t, "zero cursor skips expired rows", got, denial(x, 10, "a"))
	got, _ = denials(t, s, reader, 0, expiry(old)-1)
	wantDenials(t, "an earlier now sees the old row", got, denial(x, 10, "a"), denial(old, 1, "a"))

	steps := []struct {
		name string
		emit []global.Denial
		want []global.Denial
	}{
		{"nothing new", nil, nil},
		{"a new row", []global.Denial{denial(y, 3, "b")}, []global.Denial{denial(y, 3, "b")}},
		{"a repeated cell is no change", []global.Denial{denial(x, 99, "c")}, nil},
	}
	for _, st := range steps {
		if st.emit != nil {
			emit(t, s, st.emit...)
		}
		got, cur = denials(t, s, reader, cur, Now)
		wantDenials(t, st.name, got, st.want...)
	}
	got, _ = denials(t, s, reader, 0, expiry(x))
	wantDenials(t, "at x's expiry", got, denial(y, 3, "b"))
}

func testDenialsOthersOnly(t *testing.T, s global.Store) {
	x, y, z := cell("x", active), cell("y", active), cell("z", active)
	emit(t, s, denial(x, 10, "a"), denial(y, 20, "b"), denial(z, 30, "a"))
	for _, tc := range []struct {
		region string
		want   []global.Denial
	}{
		{"a", []global.Denial{denial(y, 20, "b")}},
		{"b", []global.Denial{denial(x, 10, "a"), denial(z, 30, "a")}},
		{"never emitted", []global.Denial{denial(x, 10, "a"), denial(y, 20, "b"), denial(z, 30, "a")}},
		{"A", []global.Denial{denial(x, 10, "a"), denial(y, 20, "b"), denial(z, 30, "a")}}, // regions are case-sensitive
	} {
		t.Run(tc.region, func(t *testing.T) {
			got, _ := denials(t, s, tc.region, 0, Now)
			wantDenials(t, "denials", got, tc.want...)
		})
	}

	_, cur := denials(t, s, "a", 0, Now)
	v, w := cell("v", active), cell("w", active)
	steps := []struct {
		name string
		emit []global.Denial
		want []global.Denial
	}{
		{"own new row", []global.Denial{denial(v, 1, "a")}, nil},
		{"another region's row on an own cell keeps the first", []global.Denial{denial(v, 2, "b")}, nil},
		{"another region's new row", []global.Denial{denial(w, 3, "b")}, []global.Denial{denial(w, 3, "b")}},
	}
	for _, st := range steps {
		emit(t, s, st.emit...)
		var got map[origin.Cell]global.Denial
		got, cur = denials(t, s, "a", cur, Now)
		wantDenials(t, st.name, got, st.want...)
	}
}

func testCleanup(t *testing.T, s global.Store) {
	ctx := context.Background()
	early, late := cell("early", 10), cell("late", active)
	// One call a cell: a store may keep a call's cells together until
	// the last of them expires.
	publish(t, s, "a", count(early, 1))
	publish(t, s, "a", count(late, 1))
	publish(t, s, "b", count(early, 2))
	publish(t, s, "b", count(late, 2))
	if err := s.Announce(ctx, "b", Now); err != nil { // Regions counts it from here on
		t.Fatal(err)
	}
	emit(t, s, denial(early, 1, "a"), denial(cell("early2", 10), 1, "a"), denial(late, 1, "a"))

	n, err := s.Cleanup(ctx, expiry(early), 1)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("Cleanup deleted %d rows, want 4 (2 count rows, 2 denials)", n)
	}
	got, p, err := pullAt(s, "a", expiry(early)-1)
	if err != nil {
		t.Fatal(err)
	}
	wantCells(t, "after cleanup, seen from before the expiry", byCell(t, "a", got), imp(late, 1, 2))
	if p.Regions != 2 {
		t.Fatalf("cleanup changed Regions: %d", p.Regions)
	}
	ds, _ := denials(t, s, reader, 0, expiry(early)-1)
	wantDenials(t, "denials after cleanup", ds, denial(late, 1, "a"))
	if n, err := s.Cleanup(ctx, expiry(early), 100); err != nil || n != 0 {
		t.Fatalf("second Cleanup = %d, %v; want 0", n, err)
	}
}

func pullAt(s global.Store, region string, now int64) ([]global.Entry, global.Pull, error) {
	p, err := s.Pull(context.Background(), region, 0, now, time.Hour.Milliseconds())
	return p.Entries, p, err
}

// identities are distinct keys that naive encodings confuse: separators in
// fields, NUL bytes, empty fields, long fields, unicode normal forms, and
// keys that differ only in duration or sequence.
func identities() []origin.Cell {
	long := strings.Repeat("x", 512)
	keys := []origin.Key{
		{Workspace: "", Namespace: "ns", Identifier: "id"},
		{Workspace: "a:b", Namespace: "c", Identifier: "d"},
		{Workspace: "a", Namespace: "b:c", Identifier: "d"},
		{Workspace: "a", Namespace: "b", Identifier: "c:d"},
		{Workspace: "a\x00b", Namespace: "c", Identifier: "d"},
		{Workspace: "a", Namespace: "\x00b", Identifier: "c\x00d"},
		{Workspace: "a", Namespace: "b", Identifier: "c\x00"},
		{Workspace: "a", Namespace: "b", Identifier: "c"},
		{Workspace: "A", Namespace: "b", Identifier: "c"},
		{Workspace: "a", Namespace: "b", Identifier: "c "},
		{Workspace: "ws", Namespace: "ns", Identifier: long},
		{Workspace: "ws", Namespace: "ns", Identifier: long[1:]},
		{Workspace: long, Namespace: long, Identifier: long + ""},
		{Workspace: "ws", Namespace: "ns", Identifier: "\u00fc"},        // ü precomposed
		{Workspace: "ws", Namespace: "ns", Identifier: "u\u0308"},       // ü decomposed
		{Workspace: "ws", Namespace: "ns", Identifier: "\xff\xfe\x80"},  // not UTF-8
		{Workspace: "ws", Namespace: "ns", Identifier: "😀 emoji"},       // 4-byte UTF-8
		{Workspace: "ws", Namespace: "ns", Identifier: "'; DROP TABLE"}, // quoting
	}
	var cells []origin.Cell
	for _, k := range keys {
		k.Duration = time.Minute
		cells = append(cells, origin.Cell{Key: k, Sequence: active})
	}
	hourly := cells[0]
	hourly.Duration, hourly.Sequence = time.Hour, Now/time.Hour.Milliseconds()
	next := cells[0]
	next.Sequence++
	return append(cells, hourly, next)
}

func testIdentities(t *testing.T, s global.Store) {
	cells := identities()
	var counts []global.Count
	var want []imported
	var ds, wantDs []global.Denial
	for i, c := range cells {
		counts = append(counts, count(c, int64(i+1)))
		want = append(want, imp(c, 0, int64(i+1)))
		ds = append(ds, denial(c, int64(100+i), "a"))
	}
	publish(t, s, "a", counts...)
	got, _ := pull(t, s, "b", 0)
	wantCells(t, "every identity reads back byte-exact with its own count", got, want...)
	emit(t, s, ds...)
	wantDs = append(wantDs, ds...)
	gotDs, _ := denials(t, s, reader, 0, Now)
	wantDenials(t, "every denial reads back byte-exact", gotDs, wantDs...)
}

func testCanceled(t *testing.T, s global.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := cell("x", active)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Publish", func() error { return s.Publish(ctx, "a", []global.Count{count(c, 1)}, Now) }},
		{"Announce", func() error { return s.Announce(ctx, "a", Now) }},
		{"Pull", func() error { _, err := s.Pull(ctx, "a", 0, Now, 1000); return err }},
		{"EmitDenials", func() error { return s.EmitDenials(ctx, []global.Denial{denial(c, 1, "a")}) }},
		{"Denials", func() error { _, _, err := s.Denials(ctx, reader, 0, Now); return err }},
		{"Cleanup", func() error { _, err := s.Cleanup(ctx, Now, 10); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err == nil {
				t.Fatal("a call with a canceled context succeeded")
			}
		})
	}
	got, _ := pull(t, s, "b", 0)
	wantCells(t, "nothing written by canceled calls", got)
	ds, _ := denials(t, s, reader, 0, Now)
	wantDenials(t, "no denial written by canceled calls", ds)
}

func testClose(t *testing.T, s global.Store) {
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
}

// testConcurrent runs two publishers ("nodes") in each of three regions, a
// puller and a denial emitter at once. Every publisher sends every cell in
// its own shuffled order with counts that rise over rounds; at the end each
// region's entry must be the highest count any of its nodes sent.
func testConcurrent(t *testing.T, s global.Store) {
	const cellsN, rounds, nodes = 40, 12, 2
	regions := []string{"a", "b", "c"}
	cells := make([]origin.Cell, cellsN)
	for i := range cells {
		cells[i] = cell(fmt.Sprintf("c%02d", i), active)
	}
	value := func(node, round, i int) int64 { return int64(round*10 + node + i%3) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(regions)*nodes+2)
	for ri, region := range regions {
		for node := range nodes {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(ri), uint64(node)))
				for round := range rounds {
					counts := make([]global.Count, cellsN)
					for j, i := range rng.Perm(cellsN) {
						counts[j] = count(cells[i], value(node, round, i))
					}
					if err := s.Publish(ctx, region, counts, Now); err != nil {
						errs <- fmt.Errorf("Publish(%s) node %d round %d: %w", region, node, round, err)
						return
					}
				}
			})
		}
	}
	bg := background(ctx, s, cells, errs)
	wg.Wait()
	cancel()
	bg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	top := func(i int) int64 { return value(nodes-1, rounds-1, i) }
	var want []imported
	for i, c := range cells {
		want = append(want, imp(c, top(i), 2*top(i)))
	}
	got, _ := pull(t, s, "a", 0)
	wantCells(t, "after concurrent publishers", got, want...)
}

// background pulls and emits denials in a loop until ctx is done, sending
// any error other than ctx's own to errs.
func background(ctx context.Context, s global.Store, cells []origin.Cell, errs chan<- error) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		var cur global.Cursor
		for ctx.Err() == nil {
			p, err := s.Pull(ctx, "z", cur, Now, 1000)
			if err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("concurrent Pull: %w", err)
				return
			}
			cur = p.Next
		}
	})
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			d := denial(cells[i%len(cells)], int64(i), "z")
			if err := s.EmitDenials(ctx, []global.Denial{d}); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("concurrent EmitDenials: %w", err)
				return
			}
		}
	})
	return &wg
}
