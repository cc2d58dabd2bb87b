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

var _ origin.StoredImporter = (*Store)(nil)

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
		s.importLocked(im, now)
	}
	return nil
}

// ImportStored imports as Import does if holder holds the region's lease
// by the Store's clock, and returns what the Store holds of each cell
// after it (see [origin.StoredImporter]). A known import is merged like
// any other; its Stored is not Read, as an origin that writes it without
// reading returns none.
func (s *Store) ImportStored(ctx context.Context, holder string, imports []origin.Import) ([]origin.Stored, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.clock().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := &s.region; g.lease.Holder != holder || g.expiresAt <= now {
		return nil, origin.ErrFenced
	}
	out := make([]origin.Stored, len(imports))
	for i, im := range imports {
		e, sum := s.importLocked(im, now)
		if e == nil || im.Known {
			continue
		}
		st := origin.Stored{Read: true, Counts: make([]origin.RegionCount, len(im.Counts)), Sum: sum, Imported: e.imported}
		for j, c := range im.Counts {
			st.Counts[j] = origin.RegionCount{Region: c.Region, Count: e.regions[c.Region]}
		}
		out[i] = st
	}
	return out, nil
}

// importLocked merges im into its cell and returns the cell's entry (nil
// for a cell that expired, or that im would create with nothing) and the
// sum of its regions' entries.
func (s *Store) importLocked(im origin.Import, now int64) (*entry, int64) {
	e := s.liveLocked(im.Cell, now, im.Usage > 0 || slices.ContainsFunc(im.Counts, func(c origin.RegionCount) bool { return c.Count > 0 }))
	if e == nil {
		return nil, 0
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
	return e, sum
}
