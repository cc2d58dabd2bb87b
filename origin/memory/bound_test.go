package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
)

const month = 30 * 24 * time.Hour

// testClock is a clock a test moves by hand.
type testClock struct{ now time.Time }

func (c *testClock) Now() time.Time { return c.now }

// cellAt returns the current cell at now of identifier id of workspace ws
// on windows of d.
func cellAt(ws, id string, d time.Duration, now time.Time) origin.Cell {
	key := origin.Key{Workspace: ws, Namespace: "ns", Identifier: id, Duration: d}
	return origin.Cell{Key: key, Sequence: now.UnixMilli() / d.Milliseconds()}
}

// writeOnce writes one unit of c, by a writer of its own, the way named.
func writeOnce(t *testing.T, s *Store, how string, c origin.Cell) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch how {
	case "apply":
		_, err = s.Apply(ctx, []origin.Delta{add(c, 1)})
	case "decide":
		_, err = s.Decide(ctx, origin.Check{Key: c.Key, Seq: c.Sequence, Writer: newWriter(),
			Asks: []origin.Ask{{Limit: 10, Cost: 1}}})
	case "seed":
		s.Seed(c, 1, 0, map[origin.Writer]int64{newWriter(): 1})
	default:
		t.Fatalf("unknown write %q", how)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// total returns the total of cell c.
func total(t *testing.T, s *Store, c origin.Cell) int64 {
	t.Helper()
	counts, err := s.Load(context.Background(), c.Key, c.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	return counts.Current
}

// TestStoreStaysWithinMaxCells writes far more distinct cells than the
// cap, on a 30-day window, every way a cell can be created: the Store
// holds the cap at most after every write, and exactly the cap at the end.
func TestStoreStaysWithinMaxCells(t *testing.T) {
	tests := []struct {
		name           string
		max, perTenant int
		tenants, cells int
		write          string
		want           int
	}{
		{"a scan of new identifiers", 100, 0, 1, 10_000, "apply", 100},
		{"many tenants", 100, 0, 7, 10_000, "apply", 100},
		{"strict-mode decisions", 100, 0, 3, 5_000, "decide", 100},
		{"seeds from other members", 100, 0, 3, 5_000, "seed", 100},
		{"a cap per tenant under the total", 1000, 10, 3, 3_000, "apply", 30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := &testClock{now: time.UnixMilli(1_000_000)}
			s := New(clock.Now, WithMaxCells(tc.max), WithMaxCellsPerTenant(tc.perTenant))
			for i := range tc.cells {
				ws := fmt.Sprint("ws", i%tc.tenants)
				writeOnce(t, s, tc.write, cellAt(ws, fmt.Sprint("id", i), month, clock.now))
				if n := s.Len(); n > tc.max {
					t.Fatalf("after %d cells the store holds %d, over its cap of %d", i+1, n, tc.max)
				}
			}
			if n := s.Len(); n != tc.want {
				t.Fatalf("the store holds %d cells, want %d", n, tc.want)
			}
		})
	}
}

// TestStoreEvictsFairly has tenant "a" write some cells, then tenant "b"
// flood the store with new identifiers, many times its cap: cells are
// evicted from the tenants holding the most, so a tenant within its fair
// share (90% of the cap divided by the tenants holding cells) keeps every
// cell and its total; a tenant over its own cap loses its own least
// recently used cells.
func TestStoreEvictsFairly(t *testing.T) {
	tests := []struct {
		name           string
		max, perTenant int
		aCells         int
		wantKept       []int // a's cells that keep their totals (by index)
		wantLost       []int // a's cells evicted
	}{
		{"a tenant within its share keeps every cell", 100, 0, 45, span(0, 45), nil},
		{"a tenant over its own cap loses its oldest cells", 100, 10, 15, span(5, 15), span(0, 5)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := &testClock{now: time.UnixMilli(1_000_000)}
			s := New(clock.Now, WithMaxCells(tc.max), WithMaxCellsPerTenant(tc.perTenant))
			a := func(i int) origin.Cell { return cellAt("a", fmt.Sprint("a", i), month, clock.now) }
			for i := range tc.aCells {
				writeOnce(t, s, "apply", a(i))
			}
			for i := range 10 * tc.max {
				writeOnce(t, s, "apply", cellAt("b", fmt.Sprint("b", i), month, clock.now))
			}
			for _, i := range tc.wantKept {
				if got := total(t, s, a(i)); got != 1 {
					t.Errorf("a's cell %d: total %d, want 1 (kept)", i, got)
				}
			}
			for _, i := range tc.wantLost {
				if got := total(t, s, a(i)); got != 0 {
					t.Errorf("a's cell %d: total %d, want 0 (evicted)", i, got)
				}
			}
			if n := s.Len(); n > tc.max {
				t.Fatalf("the store holds %d cells, over its cap of %d", n, tc.max)
			}
		})
	}
}

// TestLargestTenantsComeDownToOneLevel fills a store with tenants "a" (30
// cells) and "b" (60), then has "c" write new cells until it has written
// ten times the cap: "a", within its share, keeps its 30; "b" and "c" come
// down to one level.
func TestLargestTenantsComeDownToOneLevel(t *testing.T) {
	clock := &testClock{now: time.UnixMilli(1_000_000)}
	s := New(clock.Now, WithMaxCells(100))
	held := map[string][]origin.Cell{}
	for ws, n := range map[string]int{"a": 30, "b": 60, "c": 1000} {
		for i := range n {
			held[ws] = append(held[ws], cellAt(ws, fmt.Sprint(ws, i), month, clock.now))
		}
	}
	for _, ws := range []string{"a", "b", "c"} {
		for _, c := range held[ws] {
			writeOnce(t, s, "apply", c)
		}
	}
	live := map[string]int{}
	for ws, cells := range held {
		for _, c := range cells {
			live[ws] += int(total(t, s, c))
		}
	}
	if live["a"] != 30 || live["b"]+live["c"] != 70 || abs(live["b"]-live["c"]) > 1 {
		t.Fatalf("cells held by tenant: %v, want a: 30, b and c: 35 each", live)
	}
}

// TestStoreEvictionOrder fills one tenant's share, then writes new cells
// of the same tenant: the cells that go first are those whose window is
// over, then those written once and never used again, the least recently
// used first; cells in use stay.
func TestStoreEvictionOrder(t *testing.T) {
	tests := []struct {
		name string
		// kept is written first (so it is the least recently written), then
		// gone; then use runs; then new cells flood the store.
		kept, gone func(i int, now time.Time) origin.Cell
		use        func(t *testing.T, s *Store, c origin.Cell)
		advance    time.Duration
	}{
		{
			name: "cells seen once go before cells written again",
			kept: func(i int, now time.Time) origin.Cell { return cellAt("a", fmt.Sprint("kept", i), month, now) },
			use:  func(t *testing.T, s *Store, c origin.Cell) { writeOnce(t, s, "apply", c) },
		},
		{
			name: "cells seen once go before cells read since",
			kept: func(i int, now time.Time) origin.Cell { return cellAt("a", fmt.Sprint("kept", i), month, now) },
			use:  func(t *testing.T, s *Store, c origin.Cell) { total(t, s, c) },
		},
		{
			name: "cells whose window is over go first",
			kept: func(i int, now time.Time) origin.Cell { return cellAt("a", fmt.Sprint("kept", i), month, now) },
			gone: func(i int, now time.Time) origin.Cell {
				return cellAt("a", fmt.Sprint("gone", i), time.Second, now)
			},
			advance: 1500 * time.Millisecond, // the 1-second cells are previous cells now
		},
	}
	const capacity, kept = 16, 8
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := &testClock{now: time.UnixMilli(1_000_000)}
			s := New(clock.Now, WithMaxCells(capacity))
			keptCells := make([]origin.Cell, kept)
			for i := range keptCells {
				keptCells[i] = tc.kept(i, clock.now)
				writeOnce(t, s, "apply", keptCells[i])
			}
			if tc.gone != nil {
				for i := range capacity - kept {
					writeOnce(t, s, "apply", tc.gone(i, clock.now))
				}
			}
			if tc.use != nil {
				for _, c := range keptCells {
					tc.use(t, s, c)
				}
			}
			clock.now = clock.now.Add(tc.advance)
			for i := range 10 * capacity {
				if tc.gone != nil && i == capacity-kept {
					break // only as many as the cells whose window is over
				}
				writeOnce(t, s, "apply", cellAt("a", fmt.Sprint("new", i), month, clock.now))
			}
			for i, c := range keptCells {
				if got := total(t, s, c); got == 0 {
					t.Errorf("kept cell %d was evicted", i)
				}
			}
			if n := s.Len(); n > capacity {
				t.Fatalf("the store holds %d cells, over its cap of %d", n, capacity)
			}
		})
	}
}

// TestEvictedCellUnderCountsNeverOverCounts evicts a cell two writers
// wrote, then has them write it again: while it is gone, reads count it as
// zero (an under-count: decisions admit more); once its writers write
// again, each adds its whole count to a total that forgot them, so the
// total comes back to the sum of their counts and never above it.
func TestEvictedCellUnderCountsNeverOverCounts(t *testing.T) {
	clock := &testClock{now: time.UnixMilli(1_000_000)}
	s := New(clock.Now, WithMaxCells(1))
	ctx := context.Background()
	x := cellAt("a", "x", month, clock.now)
	wa, wb := newWriter(), newWriter()
	steps := []struct {
		name   string
		deltas []origin.Delta
		want   int64 // x's total after the step
	}{
		{"two writers write x", []origin.Delta{{Cell: x, Writer: wa, Sent: 5}, {Cell: x, Writer: wb, Sent: 3}}, 8},
		{"a new cell evicts x: it reads as zero", []origin.Delta{add(cellAt("a", "y", month, clock.now), 1)}, 0},
		{"a writes again: its whole count, once", []origin.Delta{{Cell: x, Writer: wa, Sent: 6}}, 6},
		{"a sends the same count again: nothing added", []origin.Delta{{Cell: x, Writer: wa, Sent: 6}}, 6},
		{"b writes again: the sum of the writers' counts", []origin.Delta{{Cell: x, Writer: wb, Sent: 3}}, 9},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if _, err := s.Apply(ctx, st.deltas); err != nil {
				t.Fatal(err)
			}
			if got := total(t, s, x); got != st.want {
				t.Fatalf("x's total = %d, want %d", got, st.want)
			}
		})
	}
}

// TestSweepIsIncremental lets 10,000 cells expire, then writes one new
// cell at a time: each write removes a bounded number of expired cells
// (sweepStep at most), never all of them at once, and the expired cells
// are all gone after a bounded number of writes.
func TestSweepIsIncremental(t *testing.T) {
	tests := []struct {
		name    string
		max     int
		expired int
	}{
		{"an unbounded store", 0, 10_000},
		{"a bounded store", 20_000, 10_000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := &testClock{now: time.UnixMilli(1_000_000)}
			s := New(clock.Now, WithMaxCells(tc.max))
			for i := range tc.expired {
				writeOnce(t, s, "apply", cellAt("a", fmt.Sprint("old", i), time.Second, clock.now))
			}
			clock.now = clock.now.Add(time.Minute)
			steps := 0
			for s.Len() > steps {
				before := s.Len()
				writeOnce(t, s, "apply", cellAt("a", fmt.Sprint("new", steps), month, clock.now))
				steps++
				if removed := before + 1 - s.Len(); removed > sweepStep {
					t.Fatalf("write %d removed %d expired cells, over the %d of one step", steps, removed, sweepStep)
				}
				if steps > tc.expired {
					t.Fatalf("after %d writes the store still holds %d cells", steps, s.Len())
				}
			}
		})
	}
}

func span(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func abs(n int) int { return max(n, -n) }
