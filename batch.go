package sluice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
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
// A batch of one request is decided as [Limiter.Ratelimit] decides it. In a
// batch of several, the requests on a counter in strict mode or near its
// limit are decided by the origin, as a single request is: the origin
// reserves their units atomically under a writer of the batch's own, one
// call per counter, all at once. If every request passed, the reservations
// stand as the admissions; if any was denied (here or at the origin), or
// the caller gave up while a reservation was in flight, the origin
// withdraws them. So two nodes racing for a counter's last units
// with batches never both spend them. A batch its local view denies waits
// for nothing, and one deadline, OriginTimeout from the first wait, bounds
// every origin wait of a batch together.
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
	b := getBatch(len(rs))
	defer b.put()
	qs := b.qs
	for i := range rs {
		if err := resolve(&qs[i], &rs[i], l.nowMilli); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		qs[i].hash = l.cells.keyHash(&qs[i].cell.Key)
	}
	if l.closed.Load() {
		return nil, ErrClosed
	}
	b.w = waits{parent: ctx, timeout: l.cfg.OriginTimeout}
	defer b.w.release()

	l.batchCells(b)
	out := make([]Response, len(qs))
	curs, prevs := b.curs, b.prevs
	var atOrigin []bool // nil: nothing is decided at the origin
	passed := true
	for i := range qs {
		q := &qs[i]
		if passed && l.atOrigin(q, curs[i], prevs[i]) {
			if atOrigin == nil {
				atOrigin = make([]bool, len(qs))
			}
			atOrigin[i] = true
		}
		mode := applySpeculative
		if atOrigin != nil && atOrigin[i] {
			mode = applyReserved
		}
		o := l.apply(q, curs[i], prevs[i], mode)
		q.response(&out[i], o)
		passed = passed && o.Success
	}
	var rsv []*reservation
	if passed && atOrigin != nil {
		rsv = l.reservations(b, atOrigin)
		passed = l.reserve(b.w.ctx(), ctx, qs, rsv, out) && !l.gaveUp(ctx, rsv, out)
	}
	if !l.commit(&b.w, qs, curs, out, passed, atOrigin, rsv) {
		return nil, ErrClosed
	}
	if passed {
		return out, nil
	}
	// Rolled back: report every counter as a peek would see it now. A
	// previous cell found is the one any lookup finds; one that was
	// absent may have been created since (by a reservation's merge).
	for i := range qs {
		q := &qs[i]
		q.cost = 0
		prev := prevs[i]
		if prev == nil {
			prev = l.cells.loadPrevious(q.hash, &q.cell)
		}
		o := q.decide(curs[i].count(), prev.count())
		out[i].Current, out[i].Remaining = o.Current, o.Remaining
	}
	return out, nil
}

// batch is the working state of one RatelimitMany call: its requests
// resolved, the current and previous cell of each (see batchCells), and
// its origin waits. Batches are pooled: a call of a few requests
// allocates nothing for them. Nothing of a batch outlives its call
// (origin calls that may go on copy what they use), and put clears it.
type batch struct {
	qs    []resolved
	curs  []*cell
	prevs []*cell // nil where the previous cell was absent
	w     waits
}

// maxPooledBatch is the largest batch put back in the pool (the Envoy
// RLS sends at most 64 descriptors a call): a rare huge batch is left to
// the collector rather than held.
const maxPooledBatch = 64

var batchPool = sync.Pool{New: func() any { return new(batch) }}

// getBatch returns a cleared batch of n requests.
func getBatch(n int) *batch {
	b := batchPool.Get().(*batch)
	if cap(b.qs) < n {
		b.qs, b.curs, b.prevs = make([]resolved, n), make([]*cell, n), make([]*cell, n)
	}
	b.qs, b.curs, b.prevs = b.qs[:n], b.curs[:n], b.prevs[:n]
	return b
}

// put clears b, so that the pool holds no request's strings and no cell,
// and returns it to the pool unless it is large.
func (b *batch) put() {
	clear(b.qs)
	clear(b.curs)
	clear(b.prevs)
	b.w = waits{}
	if cap(b.qs) <= maxPooledBatch {
		batchPool.Put(b)
	}
}

// batchCells finds the current cell of each request of b, created if
// needed, and its previous cell if it exists: one lookup each, whose
// results the batch decides with. If the local view denies one of the
// requests on a counter it has read from the origin, the batch is denied
// whatever the others do: nothing is read. Otherwise the cells that need
// a read (see sync) are read, all at once when there are several, under
// b.w's one deadline; a previous cell absent before the reads is looked
// up again after them, since a read (this batch's, for a counter it holds
// twice, too) may have created it.
func (l *Limiter) batchCells(b *batch) {
	reads := 0
	denied := false
	for i := range b.qs {
		q := &b.qs[i]
		cur := l.cellsHere(q)
		prev := l.cells.loadPrevious(q.hash, &q.cell)
		b.curs[i], b.prevs[i] = cur, prev
		synced := cur.syncedAt.Load()
		if (l.origin == nil || synced != 0) && !q.decide(cur.count(), prev.count()).Success {
			denied = true
		}
		if synced == 0 || q.t-synced >= l.cfg.RefreshAfter.Milliseconds() {
			reads++
		}
	}
	if denied || reads == 0 || l.origin == nil {
		return
	}
	switch {
	case reads == 1:
		for i := range b.qs {
			l.sync(&b.w, &b.qs[i], b.curs[i], b.prevs[i])
		}
	case l.loader != nil:
		l.syncBatch(b)
	default:
		b.w.ctx() // made once, before the reads share it
		var wg sync.WaitGroup
		for i := range b.qs {
			wg.Go(func() { l.sync(&b.w, &b.qs[i], b.curs[i], b.prevs[i]) })
		}
		wg.Wait()
	}
	for i := range b.qs {
		if b.prevs[i] == nil {
			b.prevs[i] = l.cells.loadPrevious(b.qs[i].hash, &b.qs[i].cell)
		}
	}
}

// syncBatch brings the cells of b in line with the origin as sync does,
// all at once, on an origin that reads several counters in one round trip:
// the cold cells to hydrate with one LoadMany (see hydrate), each warm
// cell to refresh as sync does, beside it.
func (l *Limiter) syncBatch(b *batch) {
	b.w.ctx() // made once, before the reads share it
	var cold []int
	var wg sync.WaitGroup
	for i := range b.qs {
		q, cur, prev := &b.qs[i], b.curs[i], b.prevs[i]
		switch synced := cur.syncedAt.Load(); {
		case synced != 0:
			if q.t-synced >= l.cfg.RefreshAfter.Milliseconds() {
				wg.Go(func() { l.sync(&b.w, q, cur, prev) })
			}
		case q.decide(cur.count(), prev.count()).Success && !l.readLater(q, cur, prev):
			cold = append(cold, i)
		}
	}
	switch len(cold) {
	case 0:
	case 1:
		l.sync(&b.w, &b.qs[cold[0]], b.curs[cold[0]], b.prevs[cold[0]])
	default:
		l.hydrate(b.w.ctx(), b, cold)
	}
	wg.Wait()
}

// errLoadMany is the error of a LoadMany that answered the wrong number of
// cells: every cell of it failed.
var errLoadMany = errors.New("sluice: the origin read a batch incompletely")

// hydration is a cold cell of a batch to hydrate and its request, copied:
// the read goes on for other callers once the batch has given up.
type hydration struct {
	q   resolved
	cur *cell
}

// hydrate reads the cold cells of b at indexes cold from the origin with
// one LoadMany, as sharedRead reads one: each cell once for every
// concurrent caller (a cell another caller is reading is waited for, not
// read again), in a call that goes on if the batch gives up (ctx ends),
// bounded by OriginTimeout. A cell hydrated meanwhile is not read again.
func (l *Limiter) hydrate(ctx context.Context, b *batch, cold []int) {
	hs := make([]hydration, len(cold))
	for j, i := range cold {
		hs[j] = hydration{q: b.qs[i], cur: b.curs[i]}
	}
	l.hydrateAll(ctx, hs)
}

// hydrateAll reads the cells of hs with one LoadMany, each once for every
// concurrent reader (a cell another caller is reading is waited for, not
// read again), in a call that goes on if ctx ends, bounded by
// OriginTimeout (see readMany).
func (l *Limiter) hydrateAll(ctx context.Context, hs []hydration) {
	keys := make([]origin.Cell, len(hs))
	for i := range hs {
		keys[i] = hs[i].q.current()
	}
	detached := context.WithoutCancel(ctx) // keeps the caller's trace, not its deadline
	// DoMany fails only when the caller gave up or Close has started:
	// the caller then goes on from local state (see sharedRead).
	_ = l.reads.DoMany(ctx, keys, func(led []int) { l.readMany(detached, hs, led) })
}

// readMany hydrates the cells of hs at indexes led that are still cold
// with one LoadMany, bounded by OriginTimeout, and merges what it read as
// read does, or its failure, cell by cell.
func (l *Limiter) readMany(ctx context.Context, hs []hydration, led []int) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.OriginTimeout)
	defer cancel()
	var cells []origin.Cell
	var which []*hydration
	for _, j := range led {
		if h := &hs[j]; h.cur.syncedAt.Load() == 0 {
			cells, which = append(cells, h.q.current()), append(which, h)
		}
	}
	if len(cells) == 0 {
		return
	}
	start := time.Now()
	counts, err := l.loader.LoadMany(ctx, cells)
	took := time.Since(start)
	var some *origin.CellErrors // some cells failed, the others were read
	if (err == nil || errors.As(err, &some)) && len(counts) != len(cells) {
		some, err = nil, fmt.Errorf("%w: %d counts for %d cells", errLoadMany, len(counts), len(cells))
	}
	for k, h := range which {
		cellErr := err
		if some != nil {
			cellErr = some.Failed[k]
		}
		var c origin.Counts
		if cellErr == nil {
			c = counts[k]
		}
		l.cfg.Observer.OriginRead(readHydrate, took, cellErr)
		l.loaded(&h.q, readHydrate, h.cur, c, cellErr)
	}
}

// reservation is the part of a batch the origin decides on one counter:
// the batch's requests on it (in batch order), asked for under a writer of
// the batch's own, so that they can be withdrawn whole if the batch is
// rolled back.
type reservation struct {
	cur   *cell
	prev  *cell     // the previous cell, as the batch found it
	first *resolved // the earliest request
	idx   []int     // the requests' indexes in the batch
	check origin.Check
	v     origin.Verdict
	err   error
}

// reservations groups the requests of a batch to be decided at the origin
// (atOrigin) by counter, and builds each counter's check: their
// increments, in the count but not speculative (applyReserved), are its
// asks, admitted under a holder of the batch's own. The check carries the
// cell's count as a writer, which the origin counts as spent where it
// holds less of it (without storing it), and the speculative increments
// of the batches decided here, with the other regions' counts; not the
// increments other batches reserve at the origin, which the origin counts
// itself.
func (l *Limiter) reservations(b *batch, atOrigin []bool) []*reservation {
	var rsv []*reservation
	byCell := make(map[*cell]*reservation)
	qs, curs := b.qs, b.curs
	for i := range qs {
		if !atOrigin[i] || qs[i].cost == 0 {
			continue
		}
		r := byCell[curs[i]]
		if r == nil {
			r = &reservation{cur: curs[i], prev: b.prevs[i], first: &qs[i]}
			byCell[curs[i]] = r
			rsv = append(rsv, r)
		}
		r.idx = append(r.idx, i)
		r.check.Asks = append(r.check.Asks, origin.Ask{Limit: qs[i].limit, Cost: qs[i].cost})
		if qs[i].t < r.first.t {
			r.first, r.prev = &qs[i], b.prevs[i]
		}
	}
	for _, r := range rsv {
		q, prev := r.first, r.prev
		r.check.Key, r.check.Seq, r.check.Elapsed = q.cell.Key, q.pos.Seq, q.pos.Elapsed
		sent, speculative := r.cur.countsAside()
		r.check.Writer, r.check.Sent, r.check.Holder = r.cur.writer, sent, origin.Writer(rand.Uint64()|1)
		r.check.Imported = origin.Imported{
			Current:  window.Add(r.cur.importedCount(), speculative),
			Previous: window.Add(prev.importedCount(), prev.unsent()),
		}
	}
	return rsv
}

// errReservation is a reservation's error when the origin answered it
// stale (its holder written already, which a fresh random holder never
// is) or with a verdict of the wrong size: the counter is decided locally.
var errReservation = errors.New("sluice: a reservation answered stale or incomplete")

// reserve asks the origin for every reservation of a batch at once, within
// ctx, and fills the responses of the requests it decided. It reports
// whether the batch still passes: false if the origin denied any request.
// A counter the origin could not decide keeps its local decision, and is
// backed off for OriginBackoff as after a failed single decision, unless
// the caller gave up (parent ended): that says nothing of the origin.
func (l *Limiter) reserve(ctx, parent context.Context, qs []resolved, rsv []*reservation, out []Response) bool {
	ask := func(r *reservation) {
		start := time.Now()
		r.v, r.err = l.origin.Decide(ctx, r.check)
		l.cfg.Observer.OriginRead(readStrict, time.Since(start), r.err)
		if r.err == nil && (r.v.Stale || len(r.v.Admitted) != len(r.check.Asks)) {
			r.err = errReservation
		}
	}
	if len(rsv) == 1 {
		ask(rsv[0])
	} else {
		var wg sync.WaitGroup
		for _, r := range rsv {
			wg.Go(func() { ask(r) })
		}
		wg.Wait()
	}
	passed := true
	for _, r := range rsv {
		if r.err != nil {
			if parent.Err() == nil { // the origin failed, not the caller
				r.cur.backoffUntil.Store(r.first.t + l.cfg.OriginBackoff.Milliseconds())
			}
			l.originFailed(r.first, readStrict, r.err)
			continue
		}
		// The origin counted what the writer's count exceeds its share by
		// as spent; the answers' usage counts it too.
		c := r.check
		c.Imported.Current = window.Add(c.Imported.Current, max(0, c.Sent-r.v.Share))
		for j, o := range fillOutcomes(c, r.v) {
			q := &qs[r.idx[j]]
			q.response(&out[r.idx[j]], o)
			if !o.Success {
				passed = false
				l.denied(q, r.cur)
			}
		}
		r.cur.raiseImported(r.v.Counts.Imported.Current)
		l.changed(r.cur)
		l.mergePrevious(r.first, r.v.Counts)
	}
	return passed
}

// gaveUp reports whether the caller gave up (parent ended) while a
// reservation of its batch was in flight: the batch is then denied and
// every reservation withdrawn, since one still on its way may land after
// another batch's and be denied there, where the local decision would
// have admitted it. The requests of such reservations answer denied. A
// reservation that failed while the caller waited (the origin timed out
// or failed) stands as the local decision, as any origin failure does.
func (l *Limiter) gaveUp(parent context.Context, rsv []*reservation, out []Response) bool {
	if parent.Err() == nil {
		return false
	}
	gave := false
	for _, r := range rsv {
		if r.err == nil {
			continue
		}
		gave = true
		for _, i := range r.idx {
			out[i].Success = false
		}
	}
	return gave
}

// withdraw withdraws at the origin the reservations of a rolled-back batch
// that may hold units (the origin admitted some, or its answer was lost;
// with all, every one), all at once, within ctx, and then takes each
// reservation's increments out of its cell's count: until the origin has
// withdrawn them, an origin total merged meanwhile may hold them, and the
// count must not lose them twice. The withdrawals that fail are left to
// the replayer, which sends them again and then takes the increments out.
func (l *Limiter) withdraw(ctx context.Context, rsv []*reservation, all bool) {
	var wg sync.WaitGroup
	for _, r := range rsv {
		rw := reservationWrite{Delta: origin.Delta{Cell: origin.Cell{Key: r.check.Key, Sequence: r.check.Seq},
			Writer: r.check.Holder}, withdraw: true, cur: r.cur, cost: costOf(r.check.Asks)}
		if !all && r.err == nil && heldBy(r) == 0 {
			rw.withdrawn()
			continue
		}
		wg.Go(func() {
			if err := l.origin.Withdraw(ctx, rw.Cell, rw.Writer); err != nil {
				l.replay.writeLater(rw)
				return
			}
			rw.withdrawn()
		})
	}
	wg.Wait()
}

// commit commits (passed) or rolls back the speculative increments of the
// requests of a batch that passed, under each cell's lock so that a merge
// sees a cost either speculative or admitted, never both or neither.
// A counter decided at the origin holds the batch's increments as a
// reservation (see cell.reserveAside): committed, they are the origin's
// (its total is merged) or, where the origin could not answer, the local
// decision's, sent to the origin as its writer's count; rolled back, they
// leave the count once the origin has withdrawn them. If Close started
// meanwhile, a committed batch is taken back whole and commit reports
// false (see queued).
func (l *Limiter) commit(w *waits, qs []resolved, curs []*cell, out []Response, passed bool, atOrigin []bool, rsv []*reservation) bool {
	reserved := func(i int) bool { return atOrigin != nil && atOrigin[i] }
	if !passed && len(rsv) > 0 {
		for _, r := range rsv {
			if r.err == nil {
				// The origin's count, as it is once the holder is
				// withdrawn, with the reserved units still here until then.
				r.cur.confirm(r.v.Share)
				r.cur.merge(window.Add(r.v.Counts.Current-heldBy(r), costOf(r.check.Asks)), r.v.Share)
				l.changed(r.cur)
			}
		}
		l.withdraw(w.ctx(), rsv, false)
	}
	for i, q := range qs {
		c := curs[i]
		if reserved(i) {
			if rsv == nil && out[i].Success && q.cost > 0 {
				// Counted here (applyReserved), then the batch was denied
				// before it was reserved. One denied here added nothing.
				c.regional.Add(-q.cost)
			}
			continue // otherwise see withdraw and settle
		}
		if !out[i].Success || q.cost == 0 {
			continue
		}
		c.lock()
		c.speculative.Add(-q.cost)
		if passed && l.replay != nil {
			c.admitted.Add(q.cost)
		} else if !passed {
			c.regional.Add(-q.cost)
		}
		c.unlock()
		l.changed(c)
		if passed && l.replay != nil {
			l.queuedOnly(&qs[i], c, out[i].Current)
		}
	}
	if !passed {
		return true
	}
	l.settle(rsv)
	if l.replay == nil || !l.closed.Load() {
		return true
	}
	for i, q := range qs {
		if out[i].Success && q.cost > 0 && !reserved(i) {
			curs[i].takeBack(q.cost)
		}
	}
	if len(rsv) > 0 {
		l.withdraw(w.ctx(), rsv, true) // whatever the origin answered
	}
	return false
}

// settle commits the reservations of a batch that passed: the origin's
// total, which holds them, is merged; a reservation the origin could not
// answer stands as the local decision, and its count is sent as its
// writer's (a late reservation and that write are then the same units,
// counted once).
func (l *Limiter) settle(rsv []*reservation) {
	for _, r := range rsv {
		if r.err == nil {
			// The total holds the writer's share the origin answered with.
			r.cur.confirm(r.v.Share)
			r.cur.merge(r.v.Counts.Current, r.v.Share)
			r.cur.settled(r.v.Share)
			l.changed(r.cur)
			continue
		}
		l.replay.applyLater(origin.Delta{Cell: origin.Cell{Key: r.check.Key, Sequence: r.check.Seq},
			Writer: r.check.Holder, Sent: costOf(r.check.Asks)})
	}
}

// heldBy returns the cost the origin admitted for r, its holder's share.
func heldBy(r *reservation) int64 {
	var sum int64
	for j, ok := range r.v.Admitted {
		if ok {
			sum = window.Add(sum, r.check.Asks[j].Cost)
		}
	}
	return sum
}

// costOf returns the total cost of asks.
func costOf(asks []origin.Ask) int64 {
	var sum int64
	for _, a := range asks {
		sum = window.Add(sum, a.Cost)
	}
	return sum
}
