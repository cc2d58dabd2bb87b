package sluice

import "sync"

// changedCells holds the cells whose committed count, imported count or
// limit rose or changed since the global loop last looked at them: the
// only cells, with those it keeps for later (see Limiter.publishable), whose
// verdict under the publication rule can have turned since. A cell is on
// the list at most once, flagged flagChanged from its mark until the loop
// takes it; the list is a slice under a mutex, so the lock is taken once
// per changed cell per round, not per request, and a mark that finds the
// flag set pays one load.
type changedCells struct {
	mu    sync.Mutex
	cells []*cell
}

// mark puts c on the list unless it is on it already. It never blocks on
// I/O.
func (s *changedCells) mark(c *cell) {
	if c.flags.Load()&flagChanged != 0 || !c.setFlag(flagChanged) {
		return
	}
	s.mu.Lock()
	s.cells = append(s.cells, c)
	s.mu.Unlock()
}

// take returns the cells marked since the last take, still flagged: the
// caller clears each cell's flag before it looks at the cell, so that a
// change after that marks it again. The list goes on in buf, the slice the
// previous take returned, which the caller no longer uses.
func (s *changedCells) take(buf []*cell) []*cell {
	clear(buf)
	s.mu.Lock()
	defer s.mu.Unlock()
	taken := s.cells
	s.cells = buf[:0]
	return taken
}

// changed records that c's committed count, imported count or limit
// changed, once the change is made, for the publication rule. Without
// global counters, or for a nil c, it does nothing.
func (l *Limiter) changed(c *cell) {
	if l.changes != nil && c != nil {
		l.changes.mark(c)
	}
}
