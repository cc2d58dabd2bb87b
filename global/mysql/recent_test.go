package mysql

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/global"
)

// TestRecentPulls drives pulls of one region on MariaDB with the limiter's
// clock given: between two whole pulls, a pull reads only what changed
// since the last one less recentOverlap and returns the cursor it was
// given; a row whose statement committed late (its changed_at stamped
// before that, as a statement that started earlier stamps it) is left to
// the next whole pull, which reads it; a cursor the store did not return
// makes a whole pull.
func TestRecentPulls(t *testing.T) {
	s := openStore(t, Config{})
	wall := time.Now().UnixMilli()
	cell := func(id string) global.Count {
		return global.Count{Cell: testCell(id, wall/60_000), Count: 5, ExpiresAt: wall + 120_000}
	}
	publish := func(id string) {
		t.Helper()
		if err := s.Publish(ctx, "a", []global.Count{cell(id)}, wall); err != nil {
			t.Fatal(err)
		}
	}
	pull := func(cursor global.Cursor, at int64) (global.Pull, map[string]bool) {
		t.Helper()
		p, err := s.Pull(ctx, "b", cursor, at, 60_000)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, c := range p.Entries {
			got[c.Cell.Identifier] = true
		}
		return p, got
	}
	publish("first")
	whole, got := pull(0, wall)
	if !got["first"] {
		t.Fatalf("the first pull read %v", got)
	}
	// A late row: its statement started 2 s before the whole pull's clock
	// (whole.Next is that clock less CursorOverlap) and committed after it.
	publish("late")
	stamp := cursorTime(int64(whole.Next) + (DefaultCursorOverlap - 2*time.Second).Microseconds())
	if _, err := s.db.Exec(fmt.Sprintf("UPDATE %sbatches SET changed_at = ? ORDER BY id DESC LIMIT 1", s.cfg.TablePrefix), stamp); err != nil {
		t.Fatal(err)
	}
	publish("second")
	for _, tc := range []struct {
		name     string
		cursor   global.Cursor
		at       int64 // the limiter's clock, ms after the whole pull
		want     []string
		dontWant []string
		whole    bool
	}{
		{"recent: what changed since", whole.Next, 300, []string{"second"}, []string{"late"}, false}, // "first" changed within recentOverlap of the clock: read again
		{"recent again", whole.Next, 600, []string{"second"}, []string{"late"}, false},
		{"another cursor: whole", whole.Next - 1, 900, []string{"late", "second", "first"}, nil, true},
		{"the overlap after the whole pull: whole", whole.Next, DefaultCursorOverlap.Milliseconds(), []string{"late", "second", "first"}, nil, true},
	} {
		p, got := pull(tc.cursor, wall+tc.at)
		checkRead(t, tc.name, got, tc.want, tc.dontWant)
		if moved := p.Next != tc.cursor; moved != tc.whole {
			t.Errorf("%s: cursor %d from %d: a whole pull's %v, want %v", tc.name, p.Next, tc.cursor, moved, tc.whole)
		}
	}
}

// checkRead fails t unless got, the identifiers a read read, holds every
// one of want and none of dontWant.
func checkRead(t *testing.T, name string, got map[string]bool, want, dontWant []string) {
	t.Helper()
	for _, id := range want {
		if !got[id] {
			t.Errorf("%s: %q not read (read %v)", name, id, got)
		}
	}
	for _, id := range dontWant {
		if got[id] {
			t.Errorf("%s: %q read again (read %v)", name, id, got)
		}
	}
}

// TestRecentReadsFrom checks where a pull reads from, and what it
// returns, from the state alone.
func TestRecentReadsFrom(t *testing.T) {
	const overlap = 5 * time.Second
	sec := time.Second.Microseconds()
	var rr recentReads
	p := rr.after("eu", 0, true, false, 1_000, 100*sec, global.Pull{Next: global.Cursor(95 * sec)})
	if p.Next != global.Cursor(95*sec) {
		t.Fatalf("a whole pull returned %d", p.Next)
	}
	for _, tc := range []struct {
		name      string
		region    string
		cursor    global.Cursor
		now       int64
		overlap   time.Duration
		wantFrom  global.Cursor
		wantWhole bool
	}{
		{"the whole pull's cursor, soon after", "eu", global.Cursor(95 * sec), 1_300, overlap, global.Cursor(99 * sec), false},
		{"another region", "us", global.Cursor(95 * sec), 1_300, overlap, global.Cursor(95 * sec), true},
		{"another cursor", "eu", global.Cursor(94 * sec), 1_300, overlap, global.Cursor(94 * sec), true},
		{"the overlap later", "eu", global.Cursor(95 * sec), 6_000, overlap, global.Cursor(95 * sec), true},
		{"a clock that went back", "eu", global.Cursor(95 * sec), 999, overlap, global.Cursor(95 * sec), true},
		{"an overlap within recentOverlap", "eu", global.Cursor(95 * sec), 1_300, recentOverlap, global.Cursor(95 * sec), true},
	} {
		from, whole := rr.from(tc.region, tc.cursor, tc.now, tc.overlap)
		if from != tc.wantFrom || whole != tc.wantWhole {
			t.Errorf("%s: from %d, whole %v; want %d, %v", tc.name, from, whole, tc.wantFrom, tc.wantWhole)
		}
	}
	if p := rr.after("eu", global.Cursor(95*sec), false, false, 1_300, 101*sec, global.Pull{Next: global.Cursor(96 * sec)}); p.Next != global.Cursor(95*sec) {
		t.Errorf("a recent pull returned %d, want the cursor it was given", p.Next)
	}
	if from, _ := rr.from("eu", global.Cursor(95*sec), 1_600, overlap); from != global.Cursor(100*sec) {
		t.Errorf("after a recent pull at 101 s: from %d, want 100 s", from)
	}
	rr.after("eu", global.Cursor(95*sec), false, true, 1_700, 102*sec, global.Pull{Next: global.Cursor(97 * sec)})
	if _, whole := rr.from("eu", global.Cursor(95*sec), 1_800, overlap); !whole {
		t.Error("after a paged pull, the next pull is not whole")
	}
}

// TestRecentDenialReads: reads of denials are recent or whole as pulls
// are: a recent read reads only what was created since the last read less
// a second, and returns the cursor it was given; a denial row that
// committed late is read by the next whole read.
func TestRecentDenialReads(t *testing.T) {
	s := openStore(t, Config{})
	wall := time.Now().UnixMilli()
	emitOne := func(id string) {
		t.Helper()
		d := global.Denial{Cell: testCell(id, wall/60_000), Limit: 5, Region: "a", ExpiresAt: wall + 120_000}
		if err := s.EmitDenials(ctx, []global.Denial{d}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(cursor global.Cursor, at int64) (global.Cursor, map[string]bool) {
		t.Helper()
		ds, next, err := s.Denials(ctx, "b", cursor, at)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, d := range ds {
			got[d.Cell.Identifier] = true
		}
		return next, got
	}
	emitOne("first")
	whole, got := read(0, wall)
	if !got["first"] {
		t.Fatalf("the first read read %v", got)
	}
	emitOne("late")
	stamp := cursorTime(int64(whole) + (DefaultCursorOverlap - 2*time.Second).Microseconds())
	if _, err := s.db.Exec(fmt.Sprintf("UPDATE %sblocklist SET created_at = ? WHERE identifier = 'late'", s.cfg.TablePrefix), stamp); err != nil {
		t.Fatal(err)
	}
	emitOne("second")
	for _, tc := range []struct {
		name     string
		at       int64 // the limiter's clock, ms after the whole read
		want     []string
		dontWant []string
		whole    bool
	}{
		{"recent: what was created since", 300, []string{"second"}, []string{"late"}, false},
		{"the overlap after the whole read: whole", DefaultCursorOverlap.Milliseconds(), []string{"late", "second", "first"}, nil, true},
	} {
		next, got := read(whole, wall+tc.at)
		checkRead(t, tc.name, got, tc.want, tc.dontWant)
		if moved := next != whole; moved != tc.whole {
			t.Errorf("%s: cursor %d from %d: a whole read's %v, want %v", tc.name, next, whole, moved, tc.whole)
		}
	}
}
