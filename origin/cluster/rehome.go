package cluster

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// parkedEvery is how often deltas parked for an unreachable owner are sent
// again when no Apply of the limiter carries them.
const parkedEvery = time.Second

// rehomeLoop runs Rehome after each ring change or breaker change, and
// sends parked deltas again every parkedEvery; changes that arrive while a
// hand-over runs are coalesced into the next. With RehomeTicks, it runs
// Rehome once per tick instead, and nothing else.
func (o *Origin) rehomeLoop() {
	if ticks := o.cfg.RehomeTicks; ticks != nil {
		for {
			select {
			case <-o.ctx.Done():
				return
			case <-ticks:
				o.Rehome()
			}
		}
	}
	tick := time.NewTicker(parkedEvery)
	defer tick.Stop()
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-tick.C:
			o.flushParked()
		case <-o.changed:
			o.Rehome()
		}
	}
}

// Rehome hands the cells whose owner changed since the last hand-over (a
// member joined or left, or a peer's breaker opened or closed) to their new
// owners, then sends the parked deltas, on the caller's goroutine. It
// returns the number of cells seeded. The re-homing goroutine calls it
// after every change; a caller that drives the origin (RehomeTicks) calls
// it itself. Calls are serialised.
func (o *Origin) Rehome() int {
	o.rehomeMu.Lock()
	defer o.rehomeMu.Unlock()
	cur, seeded := o.routing(), 0
	if !cur.same(o.homed) {
		seeded = o.rehome(o.homed, cur)
		if !sameMembers(o.homed.ring, cur.ring) {
			o.cfg.Observer.RingChanged(seeded)
		}
		o.homed = cur
	}
	o.flushParked()
	return seeded
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
// differs between the routings from and to with the cell's total, and
// returns the number of cells seeded. The new owner keeps the highest seed
// it gets, so it starts from the best view of any member rather than from
// zero. A peer whose breaker is not closed is not seeded: it would not
// answer (the next change, when it answers again, seeds it).
func (o *Origin) rehome(from, to routing) int {
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
		p := v.peers[owner]
		if owner != o.cfg.ID && (p == nil || !p.closed()) {
			continue
		}
		ctx, cancel := context.WithTimeout(o.ctx, 4*o.cfg.Timeout)
		var err error
		if p == nil {
			err = o.localSeed(ctx, cells)
		} else {
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
