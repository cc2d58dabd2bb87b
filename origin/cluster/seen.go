package cluster

import (
	"maps"
	"sync"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// sweepEvery is the number of records between two sweeps of old cells.
const sweepEvery = 4096

// seen remembers the highest total this node has seen for each live cell
// (from its owner's answers, its own store and broadcasts) and the highest
// share of each writer it has seen written (its own writes, and as owner
// the writes it took), to seed a cell's new owner when the ring changes;
// and the total last broadcast for each cell, so that an owner broadcasts
// a cell again only when it grew. A new owner seeded with a writer's share
// counts only what that writer sends above it, so a write the old owner
// took is not counted again when the writer sends its count to the new one.
type seen struct {
	clock   func() time.Time
	mu      sync.Mutex
	cells   map[origin.Cell]*seenCell
	records int
}

type seenCell struct {
	total     int64
	broadcast int64                   // total last broadcast; 0: never
	shares    map[origin.Writer]int64 // nil until a write is seen
}

// seed is what a new owner takes for one cell: its total and the shares of
// the writers known.
type seed struct {
	Cell   origin.Cell
	Total  int64
	Shares map[origin.Writer]int64
}

func newSeen(clock func() time.Time) *seen {
	return &seen{clock: clock, cells: map[origin.Cell]*seenCell{}}
}

// record raises cell's total to n.
func (s *seen) record(cell origin.Cell, n int64) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getLocked(cell)
	c.total = max(c.total, n)
}

// recordWrite raises cell's total to n and writer w's share to sent.
func (s *seen) recordWrite(cell origin.Cell, n int64, w origin.Writer, sent int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getLocked(cell)
	c.total = max(c.total, n)
	c.raiseShare(w, sent)
}

// recordSeed raises the cell of sd to its total and shares.
func (s *seen) recordSeed(sd seed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getLocked(sd.Cell)
	c.total = max(c.total, sd.Total)
	for w, n := range sd.Shares {
		c.raiseShare(w, n)
	}
}

func (c *seenCell) raiseShare(w origin.Writer, n int64) {
	if n <= 0 {
		return
	}
	if c.shares == nil {
		c.shares = map[origin.Writer]int64{}
	}
	c.shares[w] = max(c.shares[w], n)
}

// markBroadcast reports whether total is higher than the last broadcast of
// cell, and records it as broadcast if so.
func (s *seen) markBroadcast(cell origin.Cell, total int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getLocked(cell)
	c.total = max(c.total, total)
	if total <= c.broadcast {
		return false
	}
	c.broadcast = total
	return true
}

// grewSinceBroadcast reports whether cell was broadcast before and total is
// higher than its last broadcast, and records total as broadcast if so.
func (s *seen) grewSinceBroadcast(cell origin.Cell, total int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cells[cell]
	if c == nil || c.broadcast == 0 || total <= c.broadcast {
		return false
	}
	c.broadcast = total
	c.total = max(c.total, total)
	return true
}

func (s *seen) getLocked(cell origin.Cell) *seenCell {
	c := s.cells[cell]
	if c == nil {
		s.records++
		if s.records%sweepEvery == 0 {
			s.sweepLocked(s.clock().UnixMilli())
		}
		c = &seenCell{}
		s.cells[cell] = c
	}
	return c
}

// snapshot returns a seed of every live cell with a total.
func (s *seen) snapshot() []seed {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(s.clock().UnixMilli())
	out := make([]seed, 0, len(s.cells))
	for cell, c := range s.cells {
		if c.total > 0 {
			out = append(out, seed{Cell: cell, Total: c.total, Shares: maps.Clone(c.shares)})
		}
	}
	return out
}

// seedOf returns the seed of cell, if it is live and has a total.
func (s *seen) seedOf(cell origin.Cell) (seed, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cells[cell]
	if c == nil || c.total <= 0 || !live(cell, s.clock().UnixMilli()) {
		return seed{}, false
	}
	return seed{Cell: cell, Total: c.total, Shares: maps.Clone(c.shares)}, true
}

func (s *seen) sweepLocked(now int64) {
	for cell := range s.cells {
		if !live(cell, now) {
			delete(s.cells, cell)
		}
	}
}

// live reports whether a decision at now can still read cell: it is the
// current or the previous cell of its counter.
func live(cell origin.Cell, now int64) bool {
	d := cell.Duration.Milliseconds()
	return d > 0 && now < (cell.Sequence+2)*d
}
