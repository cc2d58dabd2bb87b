package sluice

import (
	"context"
	"time"
)

// runJanitor evicts old cells every JanitorInterval (and, with
// MaxCountersPerWorkspace, the cells of tenants over it), and the least
// recently used cells of the tenants over their share as soon as there are
// more than MaxCounters, until ctx is done.
func (l *Limiter) runJanitor(ctx context.Context) {
	tick := time.NewTicker(l.cfg.JanitorInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			l.sweep(l.cfg.Clock().UnixMilli())
			if l.cfg.MaxCountersPerWorkspace > 0 {
				l.evict(l.cfg.Clock().UnixMilli()) // tenants over their own cap
			}
		case <-l.cells.full:
			l.sweep(l.cfg.Clock().UnixMilli())
			l.evict(l.cfg.Clock().UnixMilli())
		}
	}
}

// evict brings the number of cells down to 90% of MaxCounters, fairly
// across tenants (see evictFair), and reports what it did.
func (l *Limiter) evict(now int64) (evicted int) {
	for tenant, n := range l.evictFair(now) {
		l.cfg.Observer.Evicted(tenant, n)
		evicted += n
	}
	l.cfg.Observer.Swept(int(l.cells.live.Load()), evicted)
	return evicted
}

// sweep removes every cell that no decision at or after now can read: a cell
// older than the previous window, (seq+2)*d <= now, and not used since the
// last sweep (a caller that passes its own Request.Time may live in the
// past: its cells stay while it uses them). Strict-mode deadlines live in
// cells and never outlast them (a deadline is at most (seq+2)*d), so they
// go too. An evicted cell with unconfirmed increments stays reachable from
// the replay queue until they are sent.
func (l *Limiter) sweep(now int64) (live, evicted int) {
	for k, c := range l.cells.m.All() {
		recent := c.flags.Load()&flagRecent != 0
		if recent {
			c.clearFlag(flagRecent)
		}
		if expired(k, now) && !recent {
			if l.cells.delete(k, c) {
				evicted++
			}
			continue
		}
		live++
	}
	l.cfg.Observer.Swept(live, evicted)
	return live, evicted
}
