package sluice

import (
	"context"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/origin"
)

// localRegion is the region of a node that shares no global state with
// other nodes through its origin: a limiter that is its own origin, or one
// whose origin is not an origin.Region (the cluster origin). The node
// leads it alone, its nominations stay in memory, and imports go straight
// to its own cells. Every node of such a region runs the region's rounds
// against the store, and the store's Own counts keep them from writing a
// count twice between them.
type localRegion struct {
	l     *Limiter
	since int64
	queue []origin.Nomination
	// others holds each other region's entry of each cell imported, until
	// the cell expires: a cell's imported count is their sum.
	others map[origin.Cell]map[string]int64
}

var _ origin.Region = (*localRegion)(nil)

// Lead always grants the lease: the node is alone in its region.
func (r *localRegion) Lead(_ context.Context, req origin.LeaseRequest) (origin.Lease, error) {
	return origin.Lease{Held: true, Holder: req.Holder, Since: r.since, Fence: 1, Regions: req.Regions, Cursors: req.Cursors}, nil
}

// Nominate queues ns, keeping the newest maxTake × maxTakes.
func (r *localRegion) Nominate(_ context.Context, ns []origin.Nomination) error {
	r.queue = append(r.queue, ns...)
	if over := len(r.queue) - maxTake*maxTakes; over > 0 {
		r.queue = append(r.queue[:0], r.queue[over:]...)
	}
	return nil
}

// Nominated takes up to max nominations, oldest first.
func (r *localRegion) Nominated(_ context.Context, max int) ([]origin.Nomination, error) {
	n := min(max, len(r.queue))
	taken := append([]origin.Nomination(nil), r.queue[:n]...)
	r.queue = r.queue[n:]
	if len(r.queue) == 0 {
		r.queue = nil
	}
	return taken, nil
}

// Import raises the imported count of the node's own cells: to the sum of
// the other regions' entries of the cell, and for a denial to its usage
// less what the cell holds of this region's count. A denial's usage holds
// this region's count as far as the originator read it from the store: at
// most what this region has stored there, which a cell evicted and created
// again here (committed 0) no longer holds. Received cells are marked as
// emitted, so they are never sent back.
func (r *localRegion) Import(_ context.Context, imports []origin.Import) error {
	for _, im := range imports {
		c := r.l.globalCell(im.Cell)
		if len(im.Counts) > 0 {
			c.raiseImported(r.sum(im))
		}
		if im.Usage > 0 {
			c.setFlag(flagDenialSeen)
			c.raiseImported(im.Usage - max(c.committed(), r.l.global.published[im.Cell].count))
		}
		r.l.changed(c)
	}
	return nil
}

// sum records im's entries (each the highest count seen of it) and returns
// the sum of the cell's entries.
func (r *localRegion) sum(im origin.Import) int64 {
	if r.others == nil {
		r.others = make(map[origin.Cell]map[string]int64)
	}
	entries := r.others[im.Cell]
	if entries == nil {
		entries = make(map[string]int64, len(im.Counts))
		r.others[im.Cell] = entries
	}
	var sum int64
	for _, c := range im.Counts {
		entries[c.Region] = max(entries[c.Region], c.Count)
	}
	for _, n := range entries {
		sum += n
	}
	return sum
}

// floor raises the node's count of each cell of its own region's entries
// to what its region has stored: a node that lost its counts (a restart)
// gets them back, and its publication rule does not nominate them again.
// It also forgets the other regions' entries of cells expired at now.
func (r *localRegion) floor(entries []global.Entry, now int64) {
	g := &r.l.global
	for k := range r.others {
		if expired(k, now) {
			delete(r.others, k)
		}
	}
	for _, e := range entries {
		if e.Region != r.l.cfg.Region || e.Count <= 0 {
			continue
		}
		c := r.l.globalCell(e.Cell)
		c.floor(e.Count)
		if e.Count > g.published[e.Cell].count {
			g.setPublished(e.Cell, stored{count: e.Count, at: now})
		}
		r.l.changed(c)
	}
}
