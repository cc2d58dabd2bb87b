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
	shares    map[origin.Writer]int64 // each writer's share of count
	expiresAt int64                   // Unix ms
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

// Apply raises each delta's writer share to its Sent and returns the
// totals in order (see [origin.Origin]).
func (s *Store) Apply(ctx context.Context, deltas []origin.Delta) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.clock().UnixMilli()
	totals := make([]int64, len(deltas))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, d := range deltas {
		totals[i], _ = s.raiseLocked(d.Cell, d.Writer, d.Sent, now)
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
	cur, share := s.raiseLocked(curCell, c.Writer, c.Sent, now)
	prev := s.countLocked(origin.Cell{Key: c.Key, Sequence: c.Seq - 1}, now)
	v := origin.Verdict{Admitted: make([]bool, len(c.Asks)), Stale: share > c.Sent}
	for i, a := range c.Asks {
		if v.Stale {
			break
		}
		before := c.Before(window.Add(cur, c.Imported.Current), window.Add(prev, c.Imported.Previous))
		if o := window.Decide(before, a.Limit, a.Cost); o.Success {
			share += a.Cost
			cur, _ = s.raiseLocked(curCell, c.Writer, share, now)
			v.Admitted[i] = true
		}
	}
	v.Counts = origin.Counts{Current: cur, Previous: prev}
	v.Share = share
	return v, nil
}

// Seed raises cell c's total to at least total, and each writer's share in
// shares to at least its value, without adding the share's rise to the
// total: the total already holds it. A cluster's new owner of a cell takes
// the cell from the other members' views this way.
func (s *Store) Seed(c origin.Cell, total int64, shares map[origin.Writer]int64) {
	now := s.clock().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.liveLocked(c, now, total > 0 || len(shares) > 0)
	if e == nil {
		return
	}
	e.count = max(e.count, total)
	for w, n := range shares {
		e.shares[w] = max(e.shares[w], n)
	}
}

// Len returns the number of cells held, expired or not.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.cells)
}

// raiseLocked raises writer w's share of cell c to sent, and the total by
// as much, (re)starting the cell's expiry of three windows when it grows,
// and returns the total and w's share after it. A write of 0 to a cell that
// does not exist creates nothing.
func (s *Store) raiseLocked(c origin.Cell, w origin.Writer, sent, now int64) (total, share int64) {
	e := s.liveLocked(c, now, sent > 0)
	if e == nil {
		return 0, 0
	}
	if old := e.shares[w]; sent > old {
		e.count = window.Add(e.count, sent-old)
		e.shares[w] = sent
		e.expiresAt = now + 3*c.Duration.Milliseconds()
	}
	return e.count, e.shares[w]
}

// liveLocked returns the unexpired entry of c, creating it if create is
// set (nil otherwise).
func (s *Store) liveLocked(c origin.Cell, now int64, create bool) *entry {
	e := s.cells[c]
	if e != nil && e.expiresAt > now {
		return e
	}
	if !create {
		return nil
	}
	e = &entry{shares: map[origin.Writer]int64{}, expiresAt: now + 3*c.Duration.Milliseconds()}
	s.cells[c] = e
	return e
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
