package sluice

import (
	"context"
	"fmt"
)

// RatelimitMany decides several requests all-or-nothing.
//
// Requests are decided in order. A request that passes adds its cost
// speculatively, so later requests on the same counter see it; a denied one
// adds nothing. If every request passed, the increments are committed and each
// response is the answer at its point of the batch. If any was denied, every
// increment is rolled back and nothing is replayed or published; each
// response's Success still says whether that request passed at its point, and
// its Current and Remaining describe the state after the rollback, as a peek
// would.
//
// A batch of one request is decided as [Limiter.Ratelimit] decides it. A
// batch of several, in strict mode or near a limit, reads the origin once
// per counter and decides locally: all-or-nothing across counters cannot be
// one atomic step at the origin.
//
// If any request is invalid, RatelimitMany returns an error wrapping
// [ErrInvalidRequest] that names its index, and decides nothing.
func (l *Limiter) RatelimitMany(ctx context.Context, rs []Request) ([]Response, error) {
	if len(rs) == 1 {
		// All-or-nothing of one is Ratelimit: same answer, and in strict
		// mode or near the limit the origin decides it atomically.
		res, err := l.Ratelimit(ctx, rs[0])
		if err != nil {
			return nil, fmt.Errorf("request 0: %w", err)
		}
		return []Response{res}, nil
	}
	qs := make([]resolved, len(rs))
	for i := range rs {
		if err := resolve(&qs[i], &rs[i], l.nowMilli); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		qs[i].hash = l.cells.keyHash(&qs[i].cell.Key)
	}
	if l.closed.Load() {
		return nil, ErrClosed
	}
	w := waits{parent: ctx, timeout: l.cfg.OriginTimeout}
	defer w.release()

	out := make([]Response, len(qs))
	curs := make([]*cell, len(qs))
	passed := true
	for i := range qs {
		q := &qs[i]
		cur, prev := l.cellsFor(&w, q)
		if l.atOrigin(q, cur, prev) {
			// The batch is decided locally, all-or-nothing; in strict mode
			// or near the limit it first reads the origin, once for
			// concurrent callers.
			l.sharedRead(w.ctx(), q, readStrict, cur)
			prev = l.cells.loadPrevious(q.hash, &q.cell)
		}
		curs[i] = cur
		o := l.apply(q, cur, prev, true)
		q.response(&out[i], o)
		passed = passed && o.Success
	}

	if !l.commit(qs, curs, out, passed) {
		return nil, ErrClosed
	}
	if passed {
		return out, nil
	}
	// Rolled back: report every counter as a peek would see it now.
	for i := range qs {
		q := &qs[i]
		q.cost = 0
		prev := l.cells.loadPrevious(q.hash, &q.cell)
		o := q.decide(curs[i].count(), prev.count())
		out[i].Current, out[i].Remaining = o.Current, o.Remaining
	}
	return out, nil
}

// commit commits (passed) or rolls back the speculative increments of the
// requests of a batch that passed, under each cell's lock so that a merge
// sees a cost either speculative or admitted, never both or neither. If
// Close started meanwhile, a committed batch is taken back whole and commit
// reports false (see accepted).
func (l *Limiter) commit(qs []resolved, curs []*cell, out []Response, passed bool) bool {
	for i, q := range qs {
		if !out[i].Success || q.cost == 0 {
			continue
		}
		c := curs[i]
		c.lock()
		c.speculative.Add(-q.cost)
		if passed && l.replay != nil {
			c.admitted.Add(q.cost)
		} else if !passed {
			c.regional.Add(-q.cost)
		}
		c.unlock()
		if passed && l.replay != nil {
			l.replay.mark(c)
		}
	}
	if !passed || l.replay == nil || !l.closed.Load() {
		return true
	}
	for i, q := range qs {
		if out[i].Success && q.cost > 0 {
			curs[i].takeBack(q.cost)
		}
	}
	return false
}
