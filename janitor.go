package sluice

import (
	"context"
	"time"
)

// runJanitor evicts old cells every JanitorInterval, and the least recently
// used ones as soon as there are more than MaxCounters, until ctx is done.
func (l *Limiter) runJanitor(ctx context.Context) {
	tick := time.NewTicker(l.cfg.JanitorInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			l.sweep(l.cfg.Clock().UnixMilli())
		case <-l.cells.full:
			l.sweep(l.cfg.Clock().UnixMilli())
			l.evict(l.cfg.Clock().UnixMilli())
		}
	}
}

// evict brings the number of cells down to 90% of MaxCounters, least
// recently used first, approximated by CLOCK: a pass clears the mark of a
// used cell and evicts a cell not used since the previous pass. The first
// two passes spare cells in strict mode and cells with increments not yet
// replayed or a batch in flight; a third, if still needed, spares only
// cells used since the second. An evicted cell with increments pending
// replay stays reachable from the replay queue until they are sent.
func (l *Limiter) evict(now int64) (evicted int) {
	target := int64(l.cfg.MaxCounters) * 9 / 10
	for pass := range 3 {
		for k, c := range l.cells.m.All() {
			if l.cells.live.Load() <= target {
				l.cfg.Observer.Swept(int(l.cells.live.Load()), evicted)
				return evicted
			}
			if c.flags.And(^flagTouched)&flagTouched != 0 {
				continue // used since the last pass: a second chance
			}
			if pass < 2 && c.busy(now) {
				continue
			}
			if l.cells.delete(k, c) {
				evicted++
			}
		}
	}
	l.cfg.Observer.Swept(int(l.cells.live.Load()), evicted)
	return evicted
}

// sweep removes every cell that no decision at or after now can read: a cell
// older than the previous window, (seq+2)*d <= now. Strict-mode deadlines
// live in cells and never outlast them (a deadline is at most (seq+2)*d), so
// they go too. An evicted cell with increments still pending replay stays
// reachable from the replay queue until they are sent.
func (l *Limiter) sweep(now int64) (live, evicted int) {
	for k, c := range l.cells.m.All() {
		d := k.Duration.Milliseconds()
		if k.Sequence < now/d-1 {
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
