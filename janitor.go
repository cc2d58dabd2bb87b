package sluice

import (
	"context"
	"time"
)

// runJanitor evicts old cells every JanitorInterval until ctx is done.
func (l *Limiter) runJanitor(ctx context.Context) {
	tick := time.NewTicker(l.cfg.JanitorInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			l.sweep(l.cfg.Clock().UnixMilli())
		}
	}
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
			if l.cells.m.CompareAndDelete(cellHash(l.cells.keyHash(k.Key), k.Sequence), k, c) {
				evicted++
			}
			continue
		}
		live++
	}
	l.cfg.Observer.Swept(live, evicted)
	return live, evicted
}
