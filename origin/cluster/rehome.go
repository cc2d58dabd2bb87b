package cluster

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// parkedEvery is how often deltas parked for an unreachable owner are sent
// again when no Apply of the limiter carries them.
const parkedEvery = time.Second

// rehomeLoop hands moved cells to their new owners after each ring change,
// and sends parked deltas again every parkedEvery. Changes that arrive while
// a hand-over runs are coalesced into the next.
func (o *Origin) rehomeLoop() {
	last := o.Ring()
	tick := time.NewTicker(parkedEvery)
	defer tick.Stop()
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-tick.C:
			o.flushParked()
			continue
		case <-o.changed:
		}
		ring := o.Ring()
		o.cfg.Observer.RingChanged(o.rehome(last, ring))
		last = ring
		o.flushParked()
	}
}

// flushParked sends the parked deltas to their owners (an Apply of nothing
// else); those still unreachable stay parked.
func (o *Origin) flushParked() {
	if o.parked.empty() {
		return
	}
	ctx, cancel := context.WithTimeout(o.ctx, 4*o.cfg.Timeout)
	defer cancel()
	_, _ = o.Apply(ctx, nil)
}

// rehome seeds the new owner of every cell this node has seen whose owner
// differs between the rings from and to with the cell's total, and returns
// the number of cells seeded. The new owner keeps the highest seed it gets,
// so it starts from the best view of any member rather than from zero.
func (o *Origin) rehome(from, to *Ring) int {
	byOwner := map[string][]origin.Delta{}
	for cell, total := range o.seen.snapshot() {
		h := KeyHash(cell.Key)
		was, is := from.ownerOf(h), to.ownerOf(h)
		if was == is {
			continue
		}
		byOwner[is] = append(byOwner[is], origin.Delta{Cell: cell, Count: total})
	}
	seeded := 0
	v := o.view.Load()
	for owner, cells := range byOwner {
		ctx, cancel := context.WithTimeout(o.ctx, 4*o.cfg.Timeout)
		var err error
		if owner == o.cfg.ID {
			err = o.localSeed(ctx, cells)
		} else if p := v.peers[owner]; p != nil {
			req := seedRequest{D: make([]wireDelta, len(cells))}
			for i, d := range cells {
				req.D[i] = toWireDelta(d)
			}
			err = o.call(ctx, p, KindSeed, req, &struct{}{})
		}
		cancel()
		if err != nil {
			o.cfg.Logger.Warn("cluster: seeding a new owner failed; it starts those cells from what it has", "owner", owner, "cells", len(cells), "err", err)
			continue
		}
		seeded += len(cells)
	}
	if seeded > 0 {
		o.cfg.Logger.Info("cluster: handed moved cells to their new owners", "cells", seeded)
	}
	return seeded
}
