package sluice

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
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
	// state moves from ticketWaiting to ticketSent when a call asks the
	// origin for it, then to ticketAnswered (the decider took the origin's
	// answer for the caller); or, from either of the first two, to
	// ticketAbandoned (the caller stopped waiting and decided locally).
	state atomic.Int32
	// Set before done is closed: ok reports that the origin decided and the
	// caller takes its outcome.
	ok      bool
	outcome window.Outcome
	// Under the cell's lock, once the caller abandoned a ticket it had
	// sent: late is set when the origin answered it meanwhile (lateOutcome
	// is that answer, and an admission is counted for this node), local
	// when the caller admitted it locally first (its cost is in the cell's
	// count and its writer's count, and an origin admission of it is the
	// same increment).
	late, local bool
	lateOutcome window.Outcome
}

const (
	ticketWaiting int32 = iota
	ticketSent
	ticketAnswered
	ticketAbandoned
)

// decider queues the strict requests of one cell and runs their origin
// calls one after another.
type decider struct {
	cur, prev *cell
	queue     []*ticket
	// flying holds the tickets of the call in flight, in the order the
	// origin decides them; guarded by cur's lock.
	flying []*ticket
}

// deciders holds the deciders of the cells that have strict requests queued
// or in flight. A decider is removed when its queue runs dry.
type deciders struct {
	mu     sync.Mutex
	m      map[origin.Cell]*decider
	closed bool // no decider starts any more
	wg     sync.WaitGroup
}

// close stops new deciders from starting and waits for every decider's
// goroutine to finish.
func (ds *deciders) close() {
	ds.mu.Lock()
	ds.closed = true
	ds.mu.Unlock()
	ds.wg.Wait()
}

// decideAtOrigin has the origin decide q and reports its outcome. ok is false
// when the origin could not decide (it failed, or is backed off, or ctx ended
// first): the caller then decides locally, with applyBeside and the ticket
// it abandoned (nil if it made none). A caller that stops waiting abandons
// its ticket: if the origin admits it all the same, that admission is not
// counted for this node, so the caller's local admission, if any, is the
// one the origin keeps (see answer).
func (l *Limiter) decideAtOrigin(ctx context.Context, q *resolved, cur, prev *cell) (o window.Outcome, ok bool, tk *ticket) {
	if ctx.Err() != nil {
		return window.Outcome{}, false, nil // the request's deadline has passed already
	}
	tk = &ticket{q: *q, done: make(chan struct{})}
	if !l.enqueue(tk, cur, prev) {
		return window.Outcome{}, false, nil
	}
	select {
	case <-tk.done:
	case <-ctx.Done():
		if tk.state.CompareAndSwap(ticketWaiting, ticketAbandoned) ||
			tk.state.CompareAndSwap(ticketSent, ticketAbandoned) {
			return window.Outcome{}, false, tk
		}
		<-tk.done // answered as ctx ended: done is closed next
	}
	if !tk.ok {
		return window.Outcome{}, false, tk
	}
	if !tk.outcome.Success {
		l.denied(q, cur)
	}
	return tk.outcome, true, tk
}

// applyBeside decides q locally when it was meant for the origin and the
// origin did not answer it (tk is its abandoned ticket, or nil). If the
// origin answered tk after all (late), that answer is the decision, and
// its admission is counted already. Otherwise a call on cur may be in
// flight, and the origin may admit what it asks for: its asks count as
// spent where the local view would admit them, in the order the origin
// decides them, up to tk if the call asks for it (the origin's admission of
// tk and this one are then the same increment of the writer, and the asks
// after it cannot change the origin's answer to it); asks that their
// callers admitted here already are in the local view. The local view
// never holds less than the origin of this node's own admissions, so with
// no other writer this makes the origin's decision, and with others it
// errs only towards a denial. It looks the cell's decider up, decides and
// adds the cost to the count and the writer's count under the cell's
// lock, so a call starting meanwhile either sends the increment or is seen
// here (see cell.reserve): a decider looked up before the lock could start
// its call unseen, and the origin hand this cost to its asks.
func (l *Limiter) applyBeside(q *resolved, cur, prev *cell, tk *ticket) window.Outcome {
	cur.lock()
	d := l.deciders.of(q.current())
	if tk != nil && tk.late {
		cur.unlock()
		if !tk.lateOutcome.Success {
			l.denied(q, cur)
		}
		return tk.lateOutcome
	}
	used := window.Add(cur.regional.Load(), cur.imported.Load())
	if d != nil {
		for _, other := range d.flying {
			if other == tk {
				break
			}
			if !other.local && other.q.decide(used, prev.count()).Success {
				used = window.Add(used, other.q.cost)
			}
		}
	}
	o := q.decide(used, prev.count())
	if o.Success && q.cost > 0 && l.replay != nil {
		cur.regional.Add(q.cost)
		cur.admitted.Add(q.cost)
		if tk != nil {
			tk.local = true
		}
	}
	cur.unlock()
	if !o.Success {
		l.denied(q, cur)
	}
	l.changed(cur)
	return o
}

// of returns the decider of cell, or nil if it has none.
func (ds *deciders) of(cell origin.Cell) *decider {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.m[cell]
}

// enqueue adds tk to its cell's queue, starting the cell's decider if none
// runs. It reports false once the limiter is closing.
func (l *Limiter) enqueue(tk *ticket, cur, prev *cell) bool {
	key := tk.q.current()
	ds := &l.deciders
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.closed {
		return false
	}
	if d := ds.m[key]; d != nil {
		d.queue = append(d.queue, tk)
		return true
	}
	if ds.m == nil {
		ds.m = make(map[origin.Cell]*decider)
	}
	d := &decider{cur: cur, prev: prev, queue: []*ticket{tk}}
	ds.m[key] = d
	ds.wg.Go(func() { l.runDecider(key, d) })
	return true
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
// the most. The call carries the cell's count as a writer, pending
// increments included, and no replay of the cell starts while it is in
// flight, so the origin sees each increment once, whatever returns first. A
// replay already on its way may reach the origin after the call and return
// a total that holds the call's admissions: cell.mergeWrite keeps it from
// counting them twice.
// On success it merges the origin's totals into the cells and answers each
// ticket still waiting; on failure it backs the cell off for OriginBackoff
// and leaves the tickets undecided.
func (l *Limiter) decideBatch(d *decider, batch []*ticket) {
	batch = waiting(batch)
	if len(batch) == 0 {
		return
	}
	first := &batch[0].q
	for _, tk := range batch[1:] {
		if tk.q.t < first.t {
			first = &tk.q
		}
	}
	if d.cur.backoffUntil.Load() > first.t {
		return
	}
	d.cur.setFlag(flagDeciding)
	defer l.decided(d.cur)
	// The batches decided locally meanwhile count these costs as spent
	// until the verdict is merged; the origin counts their speculative
	// increments as spent in turn, with the other regions' counts.
	// The tickets still waiting are marked sent and recorded as the call in
	// flight with the writer's count in one step, so a caller that gives up
	// decides locally either beside the call or into the count it sends
	// (see applyBeside).
	speculative, sent := d.cur.reserve(func() int64 { return d.markSent(batch) })
	defer d.cur.release(func() { d.flying = nil })
	c := origin.Check{
		Key:     first.cell.Key,
		Seq:     first.pos.Seq,
		Elapsed: first.pos.Elapsed,
		Writer:  d.cur.writer,
		Sent:    sent,
		Imported: origin.Imported{
			Current:  window.Add(d.cur.imported.Load(), speculative),
			Previous: d.prev.importedCount(),
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.OriginTimeout)
	defer cancel()
	v, asked, err := l.decideOnce(ctx, d.cur, &c, slices.Clone(d.flying))
	if err == nil && v.Stale {
		// A late copy of a call given up on landed first: its count is
		// taken as this cell's, and the decision made again above it.
		_, c.Sent = d.cur.reserve(func() int64 { return d.markAgain(asked) })
		v, asked, err = l.decideOnce(ctx, d.cur, &c, slices.Clone(d.flying))
	}
	switch {
	case len(asked) == 0: // every caller gave up: nothing was asked
	case err != nil || v.Stale:
		d.cur.backoffUntil.Store(first.t + l.cfg.OriginBackoff.Milliseconds())
		l.originFailed(first, readStrict, err)
	default:
		l.answer(d, c, v, asked)
		d.cur.raiseImported(v.Counts.Imported.Current)
		l.changed(d.cur)
		l.mergePrevious(first, v.Counts)
		d.cur.syncedAt.Store(max(first.t, 1))
	}
}

// decideOnce asks the origin for the tickets of batch, exactly those
// recorded as the call in flight (decider.flying), with c.Sent as cur's
// count as a writer, and returns the verdict and the tickets asked for
// (none: nothing was sent). The count and the tickets were taken together
// under the cell's lock (see cell.reserve): a caller that gave up before
// is not asked for (its local admission may be in the count, and the
// origin would count it again); one that gives up after is asked for all
// the same, and decides locally counting the asks ahead of its own as
// spent, since the origin's admission and its own are then the same
// increment of the writer (see answer). Leaving it out would let the
// origin hand its units to the asks behind it. A failure leaves the cell's
// count in doubt; a stale verdict raises the count to the origin's share
// of it.
func (l *Limiter) decideOnce(ctx context.Context, cur *cell, c *origin.Check, batch []*ticket) (origin.Verdict, []*ticket, error) {
	if len(batch) == 0 {
		return origin.Verdict{}, nil, nil
	}
	c.Asks = make([]origin.Ask, len(batch))
	for i, tk := range batch {
		c.Asks[i] = origin.Ask{Limit: tk.q.limit, Cost: tk.q.cost}
	}
	start := time.Now()
	v, err := l.origin.Decide(ctx, *c)
	l.cfg.Observer.OriginRead(readStrict, time.Since(start), err)
	switch {
	case err != nil:
		cur.flags.Or(flagInDoubt)
	case v.Stale:
		cur.heldAtOrigin(v.Share)
	}
	return v, batch, err
}

// markAgain records the tickets of batch not abandoned as the call in
// flight again, for a second call after a stale verdict. It runs under the
// cell's lock.
func (d *decider) markAgain(batch []*ticket) int64 {
	d.flying = waiting(batch)
	var sum int64
	for _, tk := range d.flying {
		sum = window.Add(sum, tk.q.cost)
	}
	return sum
}

// markSent marks the tickets of batch still waiting as sent, records them
// as the call in flight and returns their total cost. It runs under the
// cell's lock.
func (d *decider) markSent(batch []*ticket) int64 {
	var sum int64
	d.flying = d.flying[:0]
	for _, tk := range batch {
		if tk.state.CompareAndSwap(ticketWaiting, ticketSent) {
			sum = window.Add(sum, tk.q.cost)
			d.flying = append(d.flying, tk)
		}
	}
	return sum
}

// waiting returns the tickets of batch whose caller still waits, in a new
// slice.
func waiting(batch []*ticket) []*ticket {
	return slices.DeleteFunc(slices.Clone(batch), func(tk *ticket) bool {
		return tk.state.Load() == ticketAbandoned
	})
}

// decided ends an origin decision on cur: replays of cur may start again,
// and cur is queued for one if the origin has not confirmed all of it.
func (l *Limiter) decided(cur *cell) {
	cur.clearFlag(flagDeciding)
	if cur.unconfirmed() > 0 {
		l.replay.mark(cur)
	}
}

// answer hands the origin's verdict to the tickets of batch, records the
// costs it admitted in the count as a writer of d's cell, merges the
// origin's total and ends the call's reservation, all in one step under
// the cell's lock: a decision made meanwhile sees the asks either as in
// flight or in the count, never in both (which would deny what fits) nor
// in neither. A ticket whose caller gave up is answered all the same
// (late, see applyBeside), unless the caller admitted it locally first:
// that admission and the origin's are then the same increment, in the
// writer's count already.
func (l *Limiter) answer(d *decider, c origin.Check, v origin.Verdict, batch []*ticket) {
	outcomes := fillOutcomes(c, v)
	var taken, local int64
	cur := d.cur
	cur.lock()
	for i, tk := range batch {
		switch {
		case tk.state.CompareAndSwap(ticketSent, ticketAnswered):
			tk.outcome, tk.ok = outcomes[i], true
		case tk.local:
			if v.Admitted[i] {
				local += c.Asks[i].Cost
			}
			continue
		default:
			tk.late, tk.lateOutcome = true, outcomes[i]
		}
		if v.Admitted[i] {
			taken += c.Asks[i].Cost
		}
	}
	included := c.Sent + taken + local
	cur.admitted.Add(taken)
	raise(&cur.acked, included)
	cur.mergeLocked(v.Counts.Current, included)
	cur.deciding.Store(0)
	d.flying = nil
	cur.unlock()
	cur.settled(included)
}

// fillOutcomes returns each ask's outcome from the origin's verdict: the
// usage before it is the origin's count before the call's admitted costs,
// plus the costs admitted ahead of it.
func fillOutcomes(c origin.Check, v origin.Verdict) []window.Outcome {
	cur := v.Counts.Current
	for i, ok := range v.Admitted {
		if ok {
			cur -= c.Asks[i].Cost
		}
	}
	out := make([]window.Outcome, len(c.Asks))
	for i := range c.Asks {
		before := c.Before(window.Add(cur, c.Imported.Current), window.Add(v.Counts.Previous, c.Imported.Previous))
		o := window.Outcome{Success: v.Admitted[i], Current: before}
		if o.Success {
			o.Current = window.Add(before, c.Asks[i].Cost)
			cur += c.Asks[i].Cost
		}
		o.Remaining = max(0, c.Asks[i].Limit-o.Current)
		out[i] = o
	}
	return out
}
