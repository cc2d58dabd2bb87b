package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// seenCellAt returns the current cell at now of identifier id of workspace
// ws on windows of d.
func seenCellAt(ws, id string, d time.Duration, now time.Time) origin.Cell {
	key := origin.Key{Workspace: ws, Namespace: "ns", Identifier: id, Duration: d}
	return origin.Cell{Key: key, Sequence: now.UnixMilli() / d.Milliseconds()}
}

// seenWrites are the ways a cell gets into seen, each recording a total of
// 1.
var seenWrites = map[string]func(s *seen, c origin.Cell){
	"record":        func(s *seen, c origin.Cell) { s.record(c, 1, 0) },
	"recordWrite":   func(s *seen, c origin.Cell) { s.recordWrite(c, 1, 0, newWriter(), 1) },
	"recordSeed":    func(s *seen, c origin.Cell) { s.recordSeed(seed{Cell: c, Total: 1}) },
	"markBroadcast": func(s *seen, c origin.Cell) { s.markBroadcast(c, 1) },
}

// TestSeenStaysWithinItsCap records far more distinct cells of a 30-day
// window than the cap, every way a cell gets in: seen holds the cap at
// most after each, and exactly the cap at the end.
func TestSeenStaysWithinItsCap(t *testing.T) {
	tests := []struct {
		name           string
		max, perTenant int
		tenants, cells int
		write          string
		want           int
	}{
		{"totals read from owners", 100, 0, 1, 10_000, "record", 100},
		{"this node's writes", 100, 0, 5, 10_000, "recordWrite", 100},
		{"seeds taken", 100, 0, 5, 5_000, "recordSeed", 100},
		{"broadcasts", 100, 0, 5, 5_000, "markBroadcast", 100},
		{"a cap per tenant under the total", 1000, 10, 3, 3_000, "record", 30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := time.UnixMilli(1_000_000)
			s := newSeen(func() time.Time { return now }, tc.max, tc.perTenant)
			for i := range tc.cells {
				ws := fmt.Sprint("ws", i%tc.tenants)
				seenWrites[tc.write](s, seenCellAt(ws, fmt.Sprint("id", i), 30*24*time.Hour, now))
				if n := s.len(); n > tc.max {
					t.Fatalf("after %d cells seen holds %d, over its cap of %d", i+1, n, tc.max)
				}
			}
			if n := s.len(); n != tc.want {
				t.Fatalf("seen holds %d cells, want %d", n, tc.want)
			}
		})
	}
}

// TestSeenEvictsFairly has tenant "a" record cells within its share, then
// tenant "b" record ten times the cap: "a" keeps the seed of every cell,
// and only "b"'s cells were evicted.
func TestSeenEvictsFairly(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	const capacity, aCells = 100, 45 // a's share: 90% of 100 over 2 tenants
	s := newSeen(func() time.Time { return now }, capacity, 0)
	a := func(i int) origin.Cell { return seenCellAt("a", fmt.Sprint("a", i), 30*24*time.Hour, now) }
	for i := range aCells {
		s.recordWrite(a(i), 1, 0, newWriter(), 1)
	}
	for i := range 10 * capacity {
		s.recordWrite(seenCellAt("b", fmt.Sprint("b", i), 30*24*time.Hour, now), 1, 0, newWriter(), 1)
	}
	for i := range aCells {
		if sd, ok := s.seedOf(a(i)); !ok || sd.Total != 1 || len(sd.Shares) != 1 {
			t.Errorf("a's cell %d: seed %+v, %v; want its total and its writer's share", i, sd, ok)
		}
	}
	if n := s.len(); n != capacity {
		t.Fatalf("seen holds %d cells, want %d", n, capacity)
	}
}

// TestSeenSweepIsIncremental lets 10,000 cells pass their window, then
// records one new cell at a time: each removes a bounded number of dead
// cells (sweepStep at most), never all of them at once, and the dead cells
// are all gone after a bounded number of records.
func TestSeenSweepIsIncremental(t *testing.T) {
	tests := []struct {
		name string
		max  int
		dead int
	}{
		{"room for all", 20_000, 10_000},
		{"at the cap", 10_000, 10_000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := time.UnixMilli(1_000_000)
			s := newSeen(func() time.Time { return now }, tc.max, 0)
			for i := range tc.dead {
				s.record(seenCellAt("a", fmt.Sprint("old", i), time.Second, now), 1, 0)
			}
			now = now.Add(time.Minute)
			steps := 0
			for s.len() > steps {
				before := s.len()
				s.record(seenCellAt("a", fmt.Sprint("new", steps), 30*24*time.Hour, now), 1, 0)
				steps++
				if removed := before + 1 - s.len(); removed > sweepStep {
					t.Fatalf("record %d removed %d dead cells, over the %d of one step", steps, removed, sweepStep)
				}
				if steps > tc.dead {
					t.Fatalf("after %d records seen still holds %d cells", steps, s.len())
				}
			}
			if got := len(s.snapshot()); got != steps {
				t.Fatalf("snapshot holds %d cells, want the %d live ones", got, steps)
			}
		})
	}
}

// TestOriginStaysWithinMaxCells has a node alone on its ring (the owner of
// every cell) take ten times Config.MaxCells distinct cells: its store
// holds MaxCells at most, and the cells it remembers for re-homing twice
// that.
func TestOriginStaysWithinMaxCells(t *testing.T) {
	tests := []struct {
		name                string
		maxCells, perTenant int
		wantStore, wantSeen int
	}{
		{"a cap", 100, 0, 100, 200},
		{"a cap per workspace", 1000, 10, 30, 60},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := time.UnixMilli(1_000_000)
			o, err := New(Config{ID: "a", MaxCells: tc.maxCells, MaxCellsPerWorkspace: tc.perTenant, Clock: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			for i := range 3000 {
				c := seenCellAt(fmt.Sprint("ws", i%3), fmt.Sprint("id", i), 30*24*time.Hour, now)
				if _, err := o.Apply(t.Context(), []origin.Delta{add(c, 1)}); err != nil {
					t.Fatal(err)
				}
			}
			if got := o.store.Len(); got != tc.wantStore {
				t.Errorf("the store holds %d cells, want %d", got, tc.wantStore)
			}
			if got := o.seen.len(); got != tc.wantSeen {
				t.Errorf("seen holds %d cells, want %d", got, tc.wantSeen)
			}
		})
	}
}
