package sluice

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin"
)

// The simulator and the tests reach a limiter's background work through
// package internal/drive, which cannot import this package: it is handed
// the constructor here.
func init() {
	drive.Register(func(cfg any, o drive.Options) (any, drive.Handle, error) {
		c, ok := cfg.(Config)
		if !ok {
			return nil, nil, fmt.Errorf("%w: drive.New takes a sluice.Config, not a %T", ErrInvalidConfig, cfg)
		}
		l, err := newLimiter(c, o)
		if err != nil {
			return nil, nil, err
		}
		return l, driven{l}, nil
	})
}

// driven is the [drive.Handle] of a limiter.
type driven struct{ l *Limiter }

// Flush replays every accepted increment queued so far to the origin, on
// the caller's goroutine, and returns when the origin has answered. A
// failed replay keeps its increments queued for the next round. Without an
// origin it does nothing.
func (d driven) Flush() {
	if d.l.replay != nil {
		d.l.replay.flushNow()
	}
}

// Round runs one replay round on the caller's goroutine, parked cells
// waiting for their turn as with the dispatcher. Without an origin it does
// nothing.
func (d driven) Round() {
	if d.l.replay != nil {
		d.l.replay.roundNow()
	}
}

// SyncGlobal runs one round of the global layer now.
func (d driven) SyncGlobal(ctx context.Context) error { return d.l.syncGlobal(ctx) }

// Cells returns how many cells the limiter holds in memory.
func (d driven) Cells() int64 { return d.l.cells.live.Load() }

// mergeRemote raises the local view of cell to total, a count of this
// region that an origin pushed to this node without being asked (the
// cluster origin's exceed broadcast, through [origin.Pusher]): the limiter
// then denies locally what the origin denies, with no origin call. Like an
// origin read, it never lowers a count, keeps the local increments the
// origin has not seen yet, and marks the cell as read now, so no refresh
// follows at once. Cells that are neither the current nor the previous cell
// of their counter at this instant, and a closed limiter, are ignored. It
// is safe for concurrent use.
func (l *Limiter) mergeRemote(cell origin.Cell, total int64) {
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
	l.changed(c)
	c.syncedAt.Store(now)
}
