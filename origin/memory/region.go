package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/origin"
)

// MaxNominations is the most nominations a Store queues for its region's
// leader (see [origin.Region.Nominate]); past it the oldest are dropped.
const MaxNominations = 1 << 20

var _ origin.Region = (*Store)(nil)

// region is the state of a Store's [origin.Region]: the lease and the
// queue of nominations. It is guarded by the Store's lock.
type region struct {
	lease     origin.Lease // Held is never set here
	expiresAt int64        // Unix ms when lease lapses
	queue     []origin.Nomination
}

// Lead makes r.Holder the leader unless another holder's lease is current
// by the Store's clock, and returns the lease (see [origin.Region]).
func (s *Store) Lead(ctx context.Context, r origin.LeaseRequest) (origin.Lease, error) {
	if err := ctx.Err(); err != nil {
		return origin.Lease{}, err
	}
	if r.Holder == "" || r.TTL <= 0 {
		return origin.Lease{}, fmt.Errorf("memory: lead: a holder and a positive TTL are required")
	}
	now := s.clock().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	g := &s.region
	current := g.lease.Holder != "" && g.expiresAt > now
	switch {
	case current && g.lease.Holder != r.Holder:
		return g.lease, nil
	case current: // a renewal
		g.lease.Regions, g.lease.Cursors = r.Regions, r.Cursors
	default: // a lease that lapsed is a new term, even for its last holder
		g.lease.Holder, g.lease.Since = r.Holder, now
		g.lease.Fence++
	}
	g.expiresAt = now + r.TTL.Milliseconds()
	l := g.lease
	l.Held = true
	return l, nil
}

// Nominate queues ns for the region's leader, dropping the oldest
// nominations past [MaxNominations].
func (s *Store) Nominate(ctx context.Context, ns []origin.Nomination) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.region.queue
	q = append(q, ns...)
	if over := len(q) - MaxNominations; over > 0 {
		q = append(q[:0], q[over:]...)
	}
	s.region.queue = q
	return nil
}

// Nominated takes up to max nominations, oldest first.
func (s *Store) Nominated(ctx context.Context, max int) ([]origin.Nomination, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(max, len(s.region.queue))
	taken := append([]origin.Nomination(nil), s.region.queue[:n]...)
	s.region.queue = s.region.queue[n:]
	if len(s.region.queue) == 0 {
		s.region.queue = nil // let the backing array go
	}
	return taken, nil
}

// Import raises the imported count of each import's cell (see
// [origin.Region]).
func (s *Store) Import(ctx context.Context, imports []origin.Import) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.clock().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, im := range imports {
		e := s.liveLocked(im.Cell, now, im.Usage > 0 || slices.ContainsFunc(im.Counts, func(c origin.RegionCount) bool { return c.Count > 0 }))
		if e == nil {
			continue
		}
		for _, c := range im.Counts {
			if c.Count > e.regions[c.Region] {
				if e.regions == nil {
					e.regions = make(map[string]int64)
				}
				e.regions[c.Region] = c.Count
			}
		}
		var sum int64
		for _, n := range e.regions {
			sum += n
		}
		e.imported = max(e.imported, sum, im.Usage-e.count)
	}
	return nil
}
