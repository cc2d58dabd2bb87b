package sluice

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
)

// Decisions at the origin.
//
// While a counter is in strict mode, or near its limit (OriginMargin), a
// request its local view would admit is decided by the origin in one atomic
// check-and-add (origin.Decide), so two nodes can never both spend the last
// unit of a window. The requests of one
// cell that arrive while a decision is in flight queue behind it and are
// decided together in the next call: a counter costs at most one origin call
// in flight, whatever the number of concurrent requests, and a hanging origin
// costs each cell at most one OriginTimeout per OriginBackoff.

// ticket is one request waiting for an origin decision.
type ticket struct {
	q    resolved // a copy: the caller's request stays on its stack
	done chan struct{}
	// Set before done is closed: ok reports that the origin decided,
	// outcome is its answer.
	ok      bool
	outcome window.Outcome
}

// decider queues the strict requests of one cell and runs their origin
// calls one after another.
type decider struct {
	cur, prev *cell
	queue     []*ticket
}

// deciders holds the deciders of the cells that have strict requests queued
// or in flight. A decider is removed when its queue runs dry.
type deciders struct {
	mu sync.Mutex
	m  map[origin.Cell]*decider
	wg sync.WaitGroup
}

// wait waits for every decider's goroutine to finish.
func (ds *deciders) wait() { ds.wg.Wait() }

// decideAtOrigin has the origin decide q and reports its outcome. ok is false
// when the origin could not decide (it failed, or is backed off, or ctx ended
// first): the caller then decides locally.
func (l *Limiter) decideAtOrigin(ctx context.Context, q *resolved, cur, prev *cell) (o window.Outcome, ok bool) {
	tk := &ticket{q: *q, done: make(chan struct{})}
	l.enqueue(tk, cur, prev)
	select {
	case <-tk.done:
	case <-ctx.Done():
		return window.Outcome{}, false
	}
	if !tk.ok {
		return window.Outcome{}, false
	}
	if !tk.outcome.Success {
		l.denied(q, cur)
	}
	return tk.outcome, true
}

// enqueue adds tk to its cell's queue, starting the cell's decider if none
// runs.
func (l *Limiter) enqueue(tk *ticket, cur, prev *cell) {
	key := tk.q.current()
	ds := &l.deciders
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if d := ds.m[key]; d != nil {
		d.queue = append(d.queue, tk)
		return
	}
	if ds.m == nil {
		ds.m = make(map[origin.Cell]*decider)
	}
	d := &decider{cur: cur, prev: prev, queue: []*ticket{tk}}
	ds.m[key] = d
	ds.wg.Go(func() { l.runDecider(key, d) })
}

// runDecider sends the queue of d to the origin, one call at a time, until
// the queue is empty.
func (l *Limiter) runDecider(key origin.Cell, d *decider) {
	for {
		l.deciders.mu.Lock()
		batch := d.queue
		d.queue = nil
		if len(batch) == 0 {
			delete(l.deciders.m, key)
			l.deciders.mu.Unlock()
			return
		}
		if d.prev == nil {
			pk := batch[0].q.previous()
			d.prev = l.cells.load(batch[0].q.hash, &pk)
		}
		l.deciders.mu.Unlock()
		l.decideBatch(d, batch)
		for _, tk := range batch {
			close(tk.done)
		}
	}
}

// decideBatch asks the origin to decide batch (requests on one cell) in one
// call, at the instant of its earliest request, where the previous cell weighs
// the most. On success it merges the origin's totals into the cells and
// fills in each ticket's outcome; on failure it backs the cell off for
// OriginBackoff and leaves the tickets undecided.
func (l *Limiter) decideBatch(d *decider, batch []*ticket) {
	first := &batch[0].q
	for _, tk := range batch[1:] {
		if tk.q.t < first.t {
			first = &tk.q
		}
	}
	if d.cur.backoffUntil.Load() > first.t {
		return
	}
	// One timeout bounds the wait for a replay of this cell in flight and
	// the decision. Increments of a replay that did not return in time take
	// part in the decision as usage the origin does not hold, like other
	// regions' counts.
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.OriginTimeout)
	defer cancel()
	pending, inFlight := l.replay.settle(ctx, d.cur, l.cfg.ReplayTicks == nil)
	c := origin.Check{
		Key:     first.cell.Key,
		Seq:     first.pos.Seq,
		Elapsed: first.pos.Elapsed,
		Pending: pending,
		Imported: origin.Counts{
			Current:  window.Add(d.cur.imported.Load(), inFlight),
			Previous: d.prev.importedCount(),
		},
		Asks: make([]origin.Ask, len(batch)),
	}
	for i, tk := range batch {
		c.Asks[i] = origin.Ask{Limit: tk.q.limit, Cost: tk.q.cost}
	}

	start := time.Now()
	v, err := l.origin.Decide(ctx, c)
	l.cfg.Observer.OriginRead(ReadStrict, time.Since(start), err)
	if err != nil {
		if c.Pending > 0 {
			d.cur.pending.Add(c.Pending)
			l.replay.mark(d.cur)
		}
		d.cur.backoffUntil.Store(first.t + l.cfg.OriginBackoff.Milliseconds())
		l.originFailed(first, ReadStrict, err)
		return
	}
	// While a replay is in flight the origin's total may not raise the local
	// count past what it holds, so the admitted costs may show locally only
	// when the replay returns: the local view lags, never leads, and the
	// origin, which sees the in-flight increments, decides near the limit.
	l.mergeCounts(first, d.cur, v.Counts)
	d.cur.syncedAt.Store(max(first.t, 1))
	fillOutcomes(c, v, batch)
}

// fillOutcomes sets each ticket's outcome from the origin's verdict: the
// usage before it is the origin's count before the call's admitted costs,
// plus the costs admitted ahead of it.
func fillOutcomes(c origin.Check, v origin.Verdict, batch []*ticket) {
	cur := v.Counts.Current
	for i, ok := range v.Admitted {
		if ok {
			cur -= c.Asks[i].Cost
		}
	}
	for i, tk := range batch {
		before := c.Before(window.Add(cur, c.Imported.Current), window.Add(v.Counts.Previous, c.Imported.Previous))
		o := window.Outcome{Success: v.Admitted[i], Current: before}
		if o.Success {
			o.Current = window.Add(before, c.Asks[i].Cost)
			cur += c.Asks[i].Cost
		}
		o.Remaining = max(0, c.Asks[i].Limit-o.Current)
		tk.outcome, tk.ok = o, true
	}
}
