package cluster

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// sweepEvery is the number of records between two sweeps of old cells.
const sweepEvery = 4096

// seen remembers the highest total this node has seen for each live cell
// (from its owner's answers, its own store and broadcasts), to seed a
// cell's new owner when the ring changes, and the total last broadcast for
// each cell, so that an owner broadcasts a cell again only when it grew.
type seen struct {
	clock   func() time.Time
	mu      sync.Mutex
	cells   map[origin.Cell]*seenCell
	records int
}

type seenCell struct {
	total     int64
	broadcast int64 // total last broadcast; 0: never
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

// snapshot returns every live cell and its total.
func (s *seen) snapshot() map[origin.Cell]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(s.clock().UnixMilli())
	out := make(map[origin.Cell]int64, len(s.cells))
	for cell, c := range s.cells {
		if c.total > 0 {
			out[cell] = c.total
		}
	}
	return out
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

// parking holds the deltas whose owner could not be reached, summed per
// cell, until the next Apply sends them to the cell's owner then.
type parking struct {
	mu    sync.Mutex
	cells map[origin.Cell]int64
}

// add parks d; it reports false when the parking is full.
func (p *parking) add(d origin.Delta) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.cells[d.Cell]; !ok && len(p.cells) >= maxParked {
		return false
	}
	p.cells[d.Cell] += d.Count
	return true
}

// empty reports whether nothing is parked.
func (p *parking) empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.cells) == 0
}

// take empties the parking and returns the deltas of the live cells (a
// dead cell can no longer change a decision).
func (p *parking) take(now int64) []origin.Delta {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.cells) == 0 {
		return nil
	}
	out := make([]origin.Delta, 0, len(p.cells))
	for cell, n := range p.cells {
		if live(cell, now) {
			out = append(out, origin.Delta{Cell: cell, Count: n})
		}
	}
	clear(p.cells)
	return out
}
