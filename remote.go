package sluice

import "github.com/sluicehq/sluice/origin"

// MergeRemote raises the local view of cell to total, a count of this
// region that an origin pushed to this node without being asked (the
// cluster origin's exceed broadcast): the limiter then denies locally what
// the origin denies, with no origin call. Like an origin read, it never
// lowers a count, keeps the local increments the origin has not seen yet,
// and marks the cell as read now, so no refresh follows at once. Cells that
// are neither the current nor the previous cell of their counter at this
// instant, and a closed limiter, are ignored. It is safe for concurrent use.
func (l *Limiter) MergeRemote(cell origin.Cell, total int64) {
	d := cell.Duration.Milliseconds()
	if l.closed.Load() || l.origin == nil || total <= 0 || d <= 0 {
		return
	}
	now := max(l.nowMilli(), 1)
	if seq := now / d; cell.Sequence != seq && cell.Sequence != seq-1 {
		return
	}
	c := l.cells.loadOrCreate(l.cells.keyHash(&cell.Key), &cell, now)
	c.mergeRead(total)
	c.syncedAt.Store(now)
}
