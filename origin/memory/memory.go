// Package memory is an in-process regional origin: one map of window cells
// that several limiters in the same process can share, standing in for Redis
// in simulations, examples and tests.
//
// A single Sluice node does not need it: a limiter created without an origin
// is its own origin. Store is useful when several limiters must converge
// through one store without a network.
package memory

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
)

// sweepEvery is the number of Apply calls between two sweeps of expired cells.
const sweepEvery = 4096

// Store is an [origin.Origin] kept in memory. A cell expires three windows
// after its last increment (the Redis origin's keys expire a fixed time after
// their creation instead; both outlive every decision that reads them). The
// zero value is not usable; create one with [New]. A Store is safe for
// concurrent use.
type Store struct {
	clock func() time.Time

	mu      sync.Mutex
	cells   map[origin.Cell]*entry
	applies int
}

type entry struct {
	count     int64
	expiresAt int64 // Unix ms
}

var _ origin.Origin = (*Store)(nil)

// New returns an empty Store. clock supplies the time used for expiry; nil
// means time.Now.
func New(clock func() time.Time) *Store {
	if clock == nil {
		clock = time.Now
	}
	return &Store{clock: clock, cells: make(map[origin.Cell]*entry)}
}

// Load returns the totals of cells seq and seq-1 of key.
func (s *Store) Load(ctx context.Context, key origin.Key, seq int64) (origin.Counts, error) {
	if err := ctx.Err(); err != nil {
		return origin.Counts{}, err
	}
	now := s.clock().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	return origin.Counts{
		Current:  s.countLocked(origin.Cell{Key: key, Sequence: seq}, now),
		Previous: s.countLocked(origin.Cell{Key: key, Sequence: seq - 1}, now),
	}, nil
}

// Apply adds each delta to its cell and returns the totals in order.
func (s *Store) Apply(ctx context.Context, deltas []origin.Delta) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.clock().UnixMilli()
	totals := make([]int64, len(deltas))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, d := range deltas {
		totals[i] = s.addLocked(d.Cell, d.Count, now)
	}
	s.applies++
	if s.applies%sweepEvery == 0 {
		s.sweepLocked(now)
	}
	return totals, nil
}

// Decide makes the strict-mode decisions of c atomically (under the
// Store's lock), exactly as the limiter's sliding window does.
func (s *Store) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	if err := ctx.Err(); err != nil {
		return origin.Verdict{}, err
	}
	now := s.clock().UnixMilli()
	curCell := origin.Cell{Key: c.Key, Sequence: c.Seq}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.addLocked(curCell, c.Pending, now)
	prev := s.countLocked(origin.Cell{Key: c.Key, Sequence: c.Seq - 1}, now)
	v := origin.Verdict{Admitted: make([]bool, len(c.Asks))}
	for i, a := range c.Asks {
		before := c.Before(window.Add(cur, c.Imported.Current), window.Add(prev, c.Imported.Previous))
		if o := window.Decide(before, a.Limit, a.Cost); o.Success {
			cur = s.addLocked(curCell, a.Cost, now)
			v.Admitted[i] = true
		}
	}
	v.Counts = origin.Counts{Current: cur, Previous: prev}
	return v, nil
}

// Len returns the number of cells held, expired or not.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.cells)
}

// addLocked adds n to cell c, (re)starting its expiry of three windows, and
// returns its total. Adding 0 to a cell that does not exist creates nothing.
func (s *Store) addLocked(c origin.Cell, n, now int64) int64 {
	e := s.cells[c]
	if e == nil || e.expiresAt <= now {
		if n == 0 {
			return 0
		}
		e = &entry{}
		s.cells[c] = e
	}
	e.count += n
	e.expiresAt = now + 3*c.Duration.Milliseconds()
	return e.count
}

func (s *Store) countLocked(c origin.Cell, now int64) int64 {
	if e := s.cells[c]; e != nil && e.expiresAt > now {
		return e.count
	}
	return 0
}

func (s *Store) sweepLocked(now int64) {
	for c, e := range s.cells {
		if e.expiresAt <= now {
			delete(s.cells, c)
		}
	}
}
