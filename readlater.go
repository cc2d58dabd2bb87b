package sluice

import (
	"context"
	"sync"
)

// Reads that do not wait. A cold current cell is read from the origin
// before its first decision (a hydration), so that the decision sees what
// the other nodes admitted. A counter this node served in its previous
// window, whose previous cell it read within RefreshAfter and whose usage
// after the request stays under (1 − 2 × OriginMargin) × limit, where the
// cells of a warm counter are parked too, does not wait for it: when a
// window rolls over, the new cell holds only what the other nodes admitted
// since it began, and the previous cell, which weighs most early in the
// window, is known. Such a request is decided from local state at once,
// and its cell is read with the next replay round, many cells in one
// LoadMany. What the other nodes admitted in between is seen a replay
// round later, as a warm cell's view is no fresher; a request nearer the
// limit, or on a counter this node did not serve, still waits.

// maxReadsLater bounds the cells waiting for a read with the next replay
// round; past it, a cold cell is read before its decision, as any other.
const maxReadsLater = 1 << 14

// readsLater is the queue of cold cells to read with the next replay round.
type readsLater struct {
	mu sync.Mutex
	hs []hydration
}

// readLater queues q's cold cell cur for the next replay round, rather
// than reading it now, when its request may be decided without the read
// (see above), and reports whether it did or the cell is queued already.
// prev is the previous cell (nil if absent). It needs an origin that reads
// several counters in one call.
func (l *Limiter) readLater(q *resolved, cur, prev *cell) bool {
	m := l.cfg.OriginMargin
	if l.loader == nil || m <= 0 || prev == nil || q.cost == 0 {
		return false
	}
	read := prev.syncedAt.Load()
	if read == 0 || q.t-read >= l.cfg.RefreshAfter.Milliseconds() {
		return false
	}
	after := q.pos.Before(cur.count()+q.cost, prev.count())
	if float64(after) >= (1-2*m)*float64(q.limit) {
		return false
	}
	if !cur.setFlag(flagReadLater) {
		return true // queued by another request
	}
	l.later.mu.Lock()
	full := len(l.later.hs) >= maxReadsLater
	if !full {
		l.later.hs = append(l.later.hs, hydration{q: *q, cur: cur})
	}
	l.later.mu.Unlock()
	if full {
		cur.clearFlag(flagReadLater)
		return false
	}
	l.replay.wakeUp()
	return true
}

// readQueued reads the cells queued by readLater with one LoadMany (see
// hydrateAll).
func (l *Limiter) readQueued(ctx context.Context) {
	l.later.mu.Lock()
	hs := l.later.hs
	l.later.hs = nil
	l.later.mu.Unlock()
	if len(hs) == 0 {
		return
	}
	l.hydrateAll(ctx, hs)
	for i := range hs {
		hs[i].cur.clearFlag(flagReadLater)
	}
}
