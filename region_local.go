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

// Import raises the imported count of the node's own cells. A denial's
// usage holds this region's count as far as the originator read it from
// the store: at most what this region has stored there, which a cell
// evicted and created again here (committed 0) no longer holds. Received
// cells are marked as emitted, so they are never sent back.
func (r *localRegion) Import(_ context.Context, imports []origin.Import) error {
	for _, im := range imports {
		c := r.l.globalCell(im.Cell)
		c.raiseImported(im.Others)
		if im.Usage > 0 {
			c.setFlag(flagDenialSeen)
			c.raiseImported(im.Usage - max(c.committed(), r.l.global.published[im.Cell].count))
		}
	}
	return nil
}

// floor raises the node's count of each pulled cell to what its region
// has stored: a node that lost its counts (a restart) gets them back, and
// its publication rule does not nominate them again.
func (r *localRegion) floor(cells []global.Imported, now int64) {
	g := &r.l.global
	for _, imp := range cells {
		if imp.Own <= 0 {
			continue
		}
		r.l.globalCell(imp.Cell).floor(imp.Own)
		if imp.Own > g.published[imp.Cell].count {
			g.published[imp.Cell] = stored{count: imp.Own, at: now}
		}
	}
}
