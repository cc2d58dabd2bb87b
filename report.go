package sluice

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice/internal/window"
)

// Report counts usage that has already happened: the tokens an answer of a
// language model spent, the bytes a download sent. It is never denied and
// always counts r.Cost, even past the limit: the counter may then stand
// over its limit, and requests are denied until the sliding window lets
// them through again. A report counts as an admitted increment does: it is
// replayed to the origin (exactly once, like any increment), published to
// the global layer, and flushed by Close. A counter in strict mode does
// not send a report to the origin for a decision: the report is counted
// here and replayed.
//
// The Response is the state after the report: Success is true, Current
// includes r.Cost (saturated at math.MaxInt64), Remaining is
// max(0, Limit-Current). A cold counter is read from the origin first, as
// a peek would read it, so that the answer holds the region's count; one
// OriginTimeout (or ctx's deadline, if sooner) bounds that wait, and a
// failing origin never fails a report. A cost of 0 counts nothing and
// answers as a peek that passes.
//
// Invalid requests return an error wrapping [ErrInvalidRequest] and count
// nothing; after Close, and while Close runs, ErrClosed, as for
// [Limiter.Ratelimit].
func (l *Limiter) Report(ctx context.Context, r Request) (Response, error) {
	var q resolved
	if err := resolve(&q, &r, l.nowMilli); err != nil {
		return Response{}, err
	}
	if l.closed.Load() {
		return Response{}, ErrClosed
	}
	q.hash = l.cells.keyHash(&q.cell.Key)
	w := waits{parent: ctx, timeout: l.cfg.OriginTimeout}
	cur, prev := l.reportCells(&w, &q)
	w.release()
	o := l.count(&q, cur, prev)
	if q.cost > 0 && !l.queued(&q, cur, o.Current) {
		return Response{}, ErrClosed
	}
	var res Response
	q.response(&res, o)
	return res, nil
}

// ReportMany counts several reports, in order, each as [Limiter.Report]
// counts it: every report counts, whatever the others do, and a later
// report on the same counter sees the earlier ones. Each response is the
// state after its report. The cold counters of the batch are read from the
// origin all at once, under one deadline (OriginTimeout from the first
// wait, or ctx's if sooner).
//
// If any request is invalid, ReportMany returns an error wrapping
// [ErrInvalidRequest] that names its index, and counts nothing. If Close
// starts while the batch is counted, the error is ErrClosed and the batch
// is taken back whole (as [Limiter.Close] says of a decision that races it,
// a replay already on its way may have carried it to the origin).
func (l *Limiter) ReportMany(ctx context.Context, rs []Request) ([]Response, error) {
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
	curs := l.reportCellsMany(&w, qs)
	w.release()
	out := make([]Response, len(qs))
	for i := range qs {
		q := &qs[i]
		o := l.count(q, curs[i], l.cells.loadPrevious(q.hash, &q.cell))
		if q.cost > 0 && l.replay != nil {
			l.queuedOnly(q, curs[i], o.Current)
		}
		q.response(&out[i], o)
	}
	if l.replay == nil || !l.closed.Load() {
		return out, nil
	}
	// Close started: its final replay may miss some of them (see queued).
	for i := range qs {
		if qs[i].cost > 0 {
			curs[i].takeBack(qs[i].cost)
		}
	}
	return nil, ErrClosed
}

// count adds q's cost to cur's count with no limit check and returns the
// state after it as an admission's outcome. It is the increment of an
// admission (see apply, applyCommitted) without the decision: a single
// CAS, and with an origin, under the cell's lock, into the count and the
// writer's count together, as apply does. The count saturates at
// math.MaxInt64: q.cost is lowered to what was added, which is what the
// writer's count and the replay carry.
func (l *Limiter) count(q *resolved, cur, prev *cell) window.Outcome {
	if q.cost > 0 && l.replay != nil {
		cur.lock()
		defer cur.unlock()
	}
	for {
		regional := cur.regional.Load()
		next := window.Add(regional, q.cost)
		if q.cost == 0 || cur.regional.CompareAndSwap(regional, next) {
			l.changed(cur)
			before := q.pos.Before(window.Add(regional, cur.imported.Load()), prev.count())
			current := window.Add(before, q.cost)
			q.cost = next - regional
			if q.cost > 0 && l.replay != nil {
				cur.admitted.Add(q.cost)
			}
			return window.Outcome{Success: true, Current: current, Remaining: max(0, q.limit-current)}
		}
	}
}

// queuedOnly queues cur for replay after a report or a batch's admission
// of q, as queued does, without its check of Close: ReportMany and a batch
// check once for the whole batch.
func (l *Limiter) queuedOnly(q *resolved, cur *cell, current int64) {
	if list, ok := l.far(q, cur, current); ok {
		l.replay.park(cur, list)
	} else {
		l.replay.mark(cur)
	}
}

// reportCells returns q's cells as cellsFor does for a peek: a cold or
// stale counter is read from the origin unless its local view is over its
// limit already. A report waits for no decision, only for that read.
func (l *Limiter) reportCells(w *waits, q *resolved) (cur, prev *cell) {
	cost := q.cost
	q.cost = 0
	cur, prev = l.cellsFor(w, q)
	q.cost = cost
	return cur, prev
}

// reportCellsMany returns the current cell of each report of a batch, read
// as reportCells reads it; the cells that need a read are read all at
// once, under w's one deadline.
func (l *Limiter) reportCellsMany(w *waits, qs []resolved) []*cell {
	curs := make([]*cell, len(qs))
	reads := 0
	for i := range qs {
		q := &qs[i]
		if cur := l.cells.load(q.hash, &q.cell); cur == nil || q.t-cur.syncedAt.Load() >= l.cfg.RefreshAfter.Milliseconds() {
			reads++
		}
	}
	if reads <= 1 || l.origin == nil {
		for i := range qs {
			curs[i], _ = l.reportCells(w, &qs[i])
		}
		return curs
	}
	w.ctx() // made once, before the reads share it
	var wg sync.WaitGroup
	for i := range qs {
		wg.Go(func() { curs[i], _ = l.reportCells(w, &qs[i]) })
	}
	wg.Wait()
	return curs
}
