package cluster

import (
	"maps"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/fairmap"
	"github.com/sluicehq/sluice/origin"
)

// sweepStep is the number of cells each new cell recorded looks at for
// dead ones, carrying on where the previous stopped: dead cells are
// removed a few at a time, at least as fast as cells are recorded, never
// in one pass under the lock.
const sweepStep = 8

// seen remembers the highest total this node has seen for each live cell
// (from its owner's answers, its own store and broadcasts) and the highest
// share of each writer it has seen written (its own writes, and as owner
// the writes it took), to seed a cell's new owner when the ring changes;
// and the total last broadcast for each cell, so that an owner broadcasts
// a cell again only when it grew. A new owner seeded with a writer's share
// counts only what that writer sends above it, so a write the old owner
// took is not counted again when the writer sends its count to the new one.
//
// It holds at most its cap of cells, evicted by the fair rule of the
// owner's store (see [memory.WithMaxCells]): from the workspace holding the
// most, within it dead cells first, then those recorded once, then the
// least recently used, a cell whose window is over before a current one.
// An evicted cell is not seeded when its owner changes: the new owner
// starts it from what it holds, as for a cell no node had seen, and may
// under-count it; nothing is counted twice.
type seen struct {
	clock func() time.Time
	mu    sync.Mutex
	cells *fairmap.Map[origin.Cell, seenCell]
}

type seenCell struct {
	total     int64
	imported  int64                   // the other regions' count, as the owner holds it
	broadcast int64                   // total last broadcast; 0: never
	shares    map[origin.Writer]int64 // nil until a write is seen
}

// seed is what a new owner takes for one cell: its total, its imported
// count (the other regions' count of it) and the shares of the writers
// known.
type seed struct {
	Cell     origin.Cell
	Total    int64
	Imported int64
	Shares   map[origin.Writer]int64
}

// newSeen returns an empty seen that holds at most maxCells cells, and at
// most maxPerTenant of one workspace (0: no cap).
func newSeen(clock func() time.Time, maxCells, maxPerTenant int) *seen {
	return &seen{clock: clock, cells: fairmap.New(fairmap.Config[origin.Cell, seenCell]{
		Max:          maxCells,
		MaxPerTenant: maxPerTenant,
		Tenant:       func(c origin.Cell) string { return c.Workspace },
		Age:          seenAge,
	})}
}

// seenAge is what evicting cell at now costs: nothing once no decision
// can read it; less once its window is over than while it is current.
func seenAge(cell origin.Cell, _ *seenCell, now int64) fairmap.Age {
	switch d := cell.Duration.Milliseconds(); {
	case !live(cell, now):
		return fairmap.Dead
	case (cell.Sequence+1)*d <= now:
		return fairmap.Over
	default:
		return fairmap.Current
	}
}

// record raises cell's total to n and its imported count to imported.
func (s *seen) record(cell origin.Cell, n, imported int64) {
	if n <= 0 && imported <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getLocked(cell)
	c.total = max(c.total, n)
	c.imported = max(c.imported, imported)
}

// recordWrite raises cell's total to n, its imported count to imported
// and writer w's share to sent.
func (s *seen) recordWrite(cell origin.Cell, n, imported int64, w origin.Writer, sent int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getLocked(cell)
	c.total = max(c.total, n)
	c.imported = max(c.imported, imported)
	c.raiseShare(w, sent)
}

// recordSeed raises the cell of sd to its total, imported count and
// shares.
func (s *seen) recordSeed(sd seed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getLocked(sd.Cell)
	c.total = max(c.total, sd.Total)
	c.imported = max(c.imported, sd.Imported)
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
	c := s.cells.Use(cell)
	if c == nil || c.broadcast == 0 || total <= c.broadcast {
		return false
	}
	c.broadcast = total
	c.total = max(c.total, total)
	return true
}

// getLocked returns cell's record, marked used, creating it if need be
// (after sweeping a few cells and, at the cap, evicting one).
func (s *seen) getLocked(cell origin.Cell) *seenCell {
	if c := s.cells.Use(cell); c != nil {
		return c
	}
	now := s.clock().UnixMilli()
	s.cells.Sweep(now, sweepStep)
	return s.cells.Insert(cell, seenCell{}, now)
}

// snapshot returns a seed of every live cell with a total or an imported
// count. It is the one walk over every cell, once per re-homing; the cap
// bounds it.
func (s *seen) snapshot() []seed {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock().UnixMilli()
	out := make([]seed, 0, s.cells.Len())
	for cell, c := range s.cells.All() {
		if (c.total > 0 || c.imported > 0) && live(cell, now) {
			out = append(out, seed{Cell: cell, Total: c.total, Imported: c.imported, Shares: maps.Clone(c.shares)})
		}
	}
	return out
}

// seedOf returns the seed of cell, if it is live and has a total or an
// imported count.
func (s *seen) seedOf(cell origin.Cell) (seed, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cells.Peek(cell)
	if c == nil || (c.total <= 0 && c.imported <= 0) || !live(cell, s.clock().UnixMilli()) {
		return seed{}, false
	}
	return seed{Cell: cell, Total: c.total, Imported: c.imported, Shares: maps.Clone(c.shares)}, true
}

// len returns the number of cells held.
func (s *seen) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cells.Len()
}

// live reports whether a decision at now can still read cell: it is the
// current or the previous cell of its counter.
func live(cell origin.Cell, now int64) bool {
	d := cell.Duration.Milliseconds()
	return d > 0 && now < (cell.Sequence+2)*d
}
