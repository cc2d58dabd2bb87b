package cluster

import "time"

// A seed its new owner refused (it did not own the cell yet: its view of
// the ring lagged the sender's) is sent again reseedDelay after each
// re-homing, to whoever owns the cell then, up to maxReseedTries times.
const (
	reseedDelay    = 200 * time.Millisecond
	maxReseedTries = 10
)

// pendingSeed is a cell whose seed was refused, and how often.
type pendingSeed struct {
	seed
	tries int
}

// rehomeLoop runs Rehome after each ring change or breaker change, and
// reseedDelay after a Rehome that left refused seeds to send again;
// changes that arrive while a hand-over runs are coalesced into the next.
// With RehomeTicks, it runs Rehome once per tick instead, and nothing
// else.
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
	var retry <-chan time.Time
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-o.changed:
		case <-retry:
		}
		retry = nil
		if o.Rehome(); o.hasPending() {
			retry = time.After(reseedDelay)
		}
	}
}

func (o *Origin) hasPending() bool {
	o.rehomeMu.Lock()
	defer o.rehomeMu.Unlock()
	return len(o.pending) > 0
}

// Rehome hands the cells whose owner changed since the last hand-over (a
// member joined, left or restarted, or a peer's breaker opened or closed)
// to their new owners, and sends again the seeds an owner refused, on the
// caller's goroutine. It returns the number of cells seeded. The re-homing
// goroutine calls it after every change; a caller that drives the origin
// (RehomeTicks) calls it itself. Calls are serialised.
func (o *Origin) Rehome() int {
	o.rehomeMu.Lock()
	defer o.rehomeMu.Unlock()
	cur := o.routing()
	seeded := o.reseed(cur)
	if !cur.same(o.homed) {
		n := o.rehome(o.homed, cur)
		if !sameMembers(o.homed.ring, cur.ring) {
			o.cfg.Observer.RingChanged(n)
		}
		seeded += n
		o.homed = cur
	}
	return seeded
}

// rehome seeds the new owner of every cell this node has seen whose owner
// differs between the routings from and to, or restarted in between, with
// the cell's total, and returns the number of cells seeded. The new owner
// keeps the highest seed it gets, so it starts from the best view of any
// member rather than from zero.
func (o *Origin) rehome(from, to routing) int {
	byOwner := map[string][]pendingSeed{}
	for _, sd := range o.seen.snapshot() {
		h := KeyHash(sd.Cell.Key)
		was, is := from.ownerOf(h), to.ownerOf(h)
		if was == is && from.incs[is] == to.incs[is] {
			continue
		}
		byOwner[is] = append(byOwner[is], pendingSeed{seed: sd})
	}
	return o.seedOwners(byOwner, to)
}

// reseed sends the refused seeds again, with the totals this node has seen
// since, to their owners under to, and returns the number of cells seeded.
func (o *Origin) reseed(to routing) int {
	if len(o.pending) == 0 {
		return 0
	}
	byOwner := map[string][]pendingSeed{}
	for _, ps := range o.pending {
		sd, ok := o.seen.seedOf(ps.Cell)
		if !ok {
			continue // its window passed
		}
		owner := to.ownerOf(KeyHash(sd.Cell.Key))
		byOwner[owner] = append(byOwner[owner], pendingSeed{seed: sd, tries: ps.tries})
	}
	o.pending = nil
	return o.seedOwners(byOwner, to)
}

// seedOwners seeds each owner with its cells and returns the number of
// cells seeded; the cells an owner refused are kept to send again (see
// reseed). A peer whose breaker is not closed is not seeded: it would not
// answer (the next change, when it answers again, seeds it).
func (o *Origin) seedOwners(byOwner map[string][]pendingSeed, to routing) int {
	seeded, dropped := 0, 0
	v := o.view.Load()
	for owner, cells := range byOwner {
		p := v.peers[owner]
		if owner == o.cfg.ID {
			seeds := make([]seed, len(cells))
			for i, ps := range cells {
				seeds[i] = ps.seed
			}
			o.localSeed(seeds)
			seeded += len(cells)
			continue
		}
		if p == nil || !p.closed() {
			continue
		}
		n, refused, err := o.seedPeer(p, cells, to.skipped())
		seeded += n
		if err != nil {
			o.cfg.Logger.Warn("cluster: seeding a new owner failed; it starts those cells from what it has", "owner", owner, "cells", len(cells)-n-len(refused), "err", err)
		}
		for _, ps := range refused {
			if ps.tries++; ps.tries < maxReseedTries {
				o.pending = append(o.pending, ps)
			} else {
				dropped++
			}
		}
	}
	if seeded > 0 {
		o.cfg.Logger.Info("cluster: handed moved cells to their new owners", "cells", seeded)
	}
	if dropped > 0 {
		o.cfg.Logger.Warn("cluster: owners kept refusing seeds; those cells start from what their owner has", "cells", dropped, "tries", maxReseedTries)
	}
	return seeded
}

// seedPeer sends cells to p in calls under the caps, and returns the
// number of cells seeded, the cells p refused (it neither owns them nor
// stands in for their owner), and the first error of a call that failed
// (its cells are neither seeded nor refused).
func (o *Origin) seedPeer(p *peer, cells []pendingSeed, skip []string) (seeded int, refused []pendingSeed, err error) {
	var wire []wireSeed
	var cellOf []int // index in cells of each wire seed
	for i, ps := range cells {
		for _, w := range toWireSeeds(ps.seed) {
			wire, cellOf = append(wire, w), append(cellOf, i)
		}
	}
	bodies, firsts, err := packAll(wire, skip)
	if err != nil {
		return 0, nil, err
	}
	state := make([]int, len(cells)) // 0 seeded, 1 refused, 2 failed
	for c, body := range bodies {
		from, to := firsts[c], len(wire)
		if c+1 < len(firsts) {
			to = firsts[c+1]
		}
		var reply seedReply
		callErr := o.callBody(o.ctx, p, KindSeed, body, &reply)
		for i := from; i < to && callErr != nil; i++ {
			state[cellOf[i]] = 2
		}
		if callErr != nil {
			err = cmpErr(err, callErr)
			continue
		}
		for _, i := range reply.Refused {
			if i >= 0 && from+i < to && state[cellOf[from+i]] == 0 {
				state[cellOf[from+i]] = 1
			}
		}
	}
	for i, st := range state {
		switch st {
		case 0:
			seeded++
		case 1:
			refused = append(refused, cells[i])
		}
	}
	return seeded, refused, err
}
