package sluice

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// maxReplayBackoff caps the pause between replay rounds while the origin
// fails.
const maxReplayBackoff = time.Second

// maxCellFailures is the number of consecutive replays the origin may
// refuse one cell (not the call: the cell alone, for example a key another
// program overwrote) before the cell's unconfirmed increments are dropped,
// counted and logged, so that one bad key never holds the others back.
const maxCellFailures = 3

// replayer sends accepted increments to the origin asynchronously. An accepted
// increment adds to its cell's admitted count and, if the cell was clean, pushes
// the cell on a lock-free stack. One dispatcher goroutine takes the whole stack
// every ReplayInterval and hands it in batches to a pool of workers, which
// write each cell's count in one pipelined origin call and merge the returned
// totals into local state.
//
// A write carries the cell's whole count as a writer (origin.Delta), not the
// increments since the last one, so the origin counts each increment exactly
// once however often a write is sent: a failed or timed-out write is sent
// again, with whatever the cell admitted since, until the origin confirms
// it. Memory is bounded by the number of dirty cells, not by the number of
// requests: a cell is on the stack at most once. Increments leave only when
// the origin confirmed them, when their cell has expired (no decision reads
// it any more), when the origin refused the cell maxCellFailures times in a
// row, or when Close gives up after FlushTimeout; each such drop is counted
// (Observer.Dropped) and logged.
//
// A cell far from its limit is parked instead (see Limiter.far): it goes on
// a parked list, which the dispatcher turns every so often (the list of
// windows at least RefreshAfter long every RefreshAfter/2, that of shorter
// windows every 4 × ReplayInterval); a turn queues the cells parked before
// the previous turn, so a parked cell is replayed between one and two turns
// after it was parked, and its increments over that time cost the origin
// one write. A parked cell that comes near its limit is queued at once
// like any other. A list is a slice under a mutex: a cell is parked at
// most once per turn, so the lock is taken once per parked cell per turn,
// not per request.
type replayer struct {
	l       *Limiter
	head    atomic.Pointer[cell] // stack of dirty cells, linked through cell.next
	backlog atomic.Int64         // cells on the stack or in a batch not yet sent
	// marking counts the marks between their flag and their push (see
	// mark): the final flush waits for them.
	marking atomic.Int64
	wake    chan struct{}
	fails   atomic.Int32 // consecutive failed replay calls

	reservedMu sync.Mutex
	reserved   []reservationWrite // sent again each round until the origin takes them

	parkMu sync.Mutex          // guards lists
	lists  [parkLists]parkList // by parkLong and parkShort
}

// The parked lists (see replayer): that of the cells of windows at least
// RefreshAfter long, and that of shorter windows, turned faster.
const (
	parkLong = iota
	parkShort
	parkLists
)

// parkList is one parked list.
type parkList struct {
	parked   []*cell // parked since the last turn
	waiting  []*cell // parked before it: queued at the next turn
	nextTurn int64   // Unix ms of the next turn
}

type replayJob struct {
	ctx   context.Context
	cells []*cell
	done  *sync.WaitGroup
}

func newReplayer(l *Limiter) *replayer {
	return &replayer{l: l, wake: make(chan struct{}, 1)}
}

// mark queues c for replay unless it is queued already. It never blocks.
//
// The mark that sets c's flag pushes c, and counts itself in marking
// from before the flag until after the push: a mark that finds the flag
// set pushes nothing, leaving c to that one, so until its push c is
// flagged but on no stack, and the final flush, which finds no cell
// queued, must not stop while such a mark runs (see final). A mark that
// finds the flag set pays one load.
func (r *replayer) mark(c *cell) {
	if c.flags.Load()&flagDirty != 0 {
		return
	}
	r.marking.Add(1)
	if c.setFlag(flagDirty) {
		r.push(c)
	}
	r.marking.Add(-1)
}

// push puts c, flagged dirty, on the stack and wakes the dispatcher.
func (r *replayer) push(c *cell) {
	for {
		top := r.head.Load()
		c.next = top
		if r.head.CompareAndSwap(top, c) {
			break
		}
	}
	r.backlog.Add(1)
	r.wakeUp()
}

// wakeUp has the dispatcher run a round soon (see run), without blocking.
func (r *replayer) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// park puts c on parked list list unless it is parked already or queued
// for replay (which sends whatever it holds). It never blocks on I/O and
// wakes nobody: the dispatcher's turns replay it.
func (r *replayer) park(c *cell, list int) {
	if c.flags.Load()&flagDirty != 0 || !c.setFlag(flagParked) {
		return
	}
	r.parkMu.Lock()
	r.lists[list].parked = append(r.lists[list].parked, c)
	r.parkMu.Unlock()
}

// turnIfDue turns each parked list whose turn is due at now (Unix ms): the
// cells parked before its previous turn are queued for replay, those
// parked since wait for the next one.
func (r *replayer) turnIfDue(now int64) {
	var due []*cell
	r.parkMu.Lock()
	for i := range r.lists {
		pl := &r.lists[i]
		if now < pl.nextTurn {
			continue
		}
		pl.nextTurn = now + r.turnEvery(i).Milliseconds()
		due = append(due, pl.waiting...)
		pl.waiting, pl.parked = pl.parked, nil
	}
	r.parkMu.Unlock()
	r.unpark(due)
}

// reportBacklog reports the cells queued or parked for replay.
func (r *replayer) reportBacklog() {
	r.parkMu.Lock()
	parked := 0
	for _, pl := range r.lists {
		parked += len(pl.parked) + len(pl.waiting)
	}
	r.parkMu.Unlock()
	r.l.cfg.Observer.ReplayBacklog(r.backlog.Load() + int64(parked))
}

// turnEvery is the time between two turns of parked list list.
func (r *replayer) turnEvery(list int) time.Duration {
	if list == parkShort {
		return max(shortTurns*r.l.cfg.ReplayInterval, time.Millisecond)
	}
	return max(r.l.cfg.RefreshAfter/2, time.Millisecond)
}

// shortTurns is the replay intervals between two turns of the parked list
// of short windows: a cell parked there is replayed 4 to 8 intervals (100
// to 200 ms by default) after it was parked.
const shortTurns = 4

// shortWindowTurns is how many turns of the parked list of short windows a
// window at least spans for its cells to be parked there: a parked cell is
// then replayed within a quarter of its window.
const shortWindowTurns = 8

// unparkAll queues every parked cell for replay.
func (r *replayer) unparkAll() {
	var due []*cell
	r.parkMu.Lock()
	for i := range r.lists {
		due = append(due, r.lists[i].waiting...)
		due = append(due, r.lists[i].parked...)
		r.lists[i].waiting, r.lists[i].parked = nil, nil
	}
	r.parkMu.Unlock()
	r.unpark(due)
}

// unpark takes cells off parking and queues for replay those that hold
// increments the origin has not confirmed.
func (r *replayer) unpark(cells []*cell) {
	for _, c := range cells {
		c.clearFlag(flagParked)
		if c.unconfirmed() > 0 {
			r.mark(c)
		}
	}
}

// run is the dispatcher: it owns the worker pool and stops, after a final
// flush, when ctx is done. The calls of a round end with ctx too: a write
// is idempotent, so the final flush sends again whatever they had not
// confirmed.
func (r *replayer) run(ctx context.Context) {
	jobs := make(chan replayJob)
	var workers sync.WaitGroup
	for range r.l.cfg.ReplayWorkers {
		workers.Go(func() {
			for job := range jobs {
				r.flush(job.ctx, job.cells)
				job.done.Done()
			}
		})
	}
	defer func() {
		r.final(jobs)
		close(jobs)
		workers.Wait()
	}()

	if ticks := r.l.drive.ReplayTicks; ticks != nil {
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticks:
				r.round(ctx, jobs)
			}
		}
	}
	pause := time.NewTimer(0)
	defer pause.Stop()
	turns := time.NewTicker(r.turnEvery(parkLong) / 4) // a turn is late by at most a quarter
	defer turns.Stop()
	shortTurn := time.NewTicker(r.turnEvery(parkShort) / 2) // at most half
	defer shortTurn.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-turns.C:
		case <-shortTurn.C:
		}
		r.round(ctx, jobs) // Close cuts a round short: the final flush sends it again
		pause.Reset(r.backoff())
		select {
		case <-ctx.Done():
			return
		case <-pause.C:
		}
	}
}

// backoff is the pause before the next round: ReplayInterval, doubled for
// each consecutive failure, up to maxReplayBackoff (or ReplayInterval if that
// is longer).
func (r *replayer) backoff() time.Duration {
	ceiling := max(maxReplayBackoff, r.l.cfg.ReplayInterval)
	d := r.l.cfg.ReplayInterval
	for range min(r.fails.Load(), 16) {
		d = min(2*d, ceiling)
	}
	return d
}

// reservationWrite is a write about a batch's reservation (see
// Limiter.RatelimitMany) that the origin has yet to take: the withdrawal of
// a rolled-back one's writer, or the count of one the origin could not
// answer and the batch kept (Delta.Sent: its writer's count).
type reservationWrite struct {
	origin.Delta
	withdraw bool
	// cur and cost, for a withdrawal: the increments to take out of cur's
	// count once the origin has withdrawn them (see Limiter.withdraw).
	cur  *cell
	cost int64
}

// withdrawn takes a withdrawn reservation's increments out of its cell's
// count.
func (w *reservationWrite) withdrawn() {
	if w.cur != nil {
		w.cur.regional.Add(-w.cost)
	}
}

// maxReservationWrites bounds the reservation writes waiting to be sent
// again; past it, the oldest is dropped, counted and logged: a withdrawal
// left undone keeps its units spent at the origin until the cell expires
// (an under-count), a count left unsent is missing there (as any
// increment dropped).
const maxReservationWrites = 4096

// applyLater queues the write of d, a reservation's count, for the next
// rounds.
func (r *replayer) applyLater(d origin.Delta) {
	r.writeLater(reservationWrite{Delta: d})
}

// writeLater queues w and wakes the dispatcher.
func (r *replayer) writeLater(w reservationWrite) {
	r.reservedMu.Lock()
	if len(r.reserved) == maxReservationWrites {
		dropped := r.reserved[0]
		r.reserved = r.reserved[1:]
		units := dropped.Sent // a count left unsent
		if dropped.withdraw {
			units = dropped.cost // units left spent
		}
		r.l.cfg.Observer.Dropped(dropReservation, 1, units)
		r.l.cfg.Logger.Warn("sluice: too many reservation writes waiting for the origin; dropping the oldest",
			"namespace", dropped.Cell.Namespace, "withdraw", dropped.withdraw)
	}
	r.reserved = append(r.reserved, w)
	r.reservedMu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// maxReservationFailures is the number of reservation writes a round may
// see fail before it keeps the rest for the next round: one failing shard
// (a Redis Cluster master) does not hold back the writes to the others,
// and an origin that is down costs a round a few timeouts, not one per
// write.
const maxReservationFailures = 8

// sendReserved sends the queued reservation writes of cells still live,
// each within ReplayTimeout, keeping those the origin refuses (and, after
// maxReservationFailures refusals, the rest) for the next round. It
// reports whether there were any.
func (r *replayer) sendReserved(ctx context.Context) bool {
	r.reservedMu.Lock()
	pending := r.reserved
	r.reserved = nil
	r.reservedMu.Unlock()
	if len(pending) == 0 {
		return false
	}
	now := r.l.cfg.Clock().UnixMilli()
	var kept []reservationWrite
	for i, w := range pending {
		if len(kept) == maxReservationFailures {
			kept = append(kept, pending[i:]...)
			break
		}
		if expired(w.Cell, now) {
			w.withdrawn()
			continue // no decision reads it any more
		}
		if err := r.sendReservation(ctx, &w); err != nil {
			kept = append(kept, w)
		}
	}
	if len(kept) > 0 {
		r.reservedMu.Lock()
		r.reserved = append(kept, r.reserved...)
		r.reservedMu.Unlock()
	}
	return true
}

// sendReservation sends one reservation write within ReplayTimeout.
func (r *replayer) sendReservation(ctx context.Context, w *reservationWrite) error {
	ctx, cancel := context.WithTimeout(ctx, r.l.cfg.ReplayTimeout)
	defer cancel()
	if !w.withdraw {
		_, err := r.l.origin.Apply(ctx, []origin.Delta{w.Delta})
		return err
	}
	if err := r.l.origin.Withdraw(ctx, w.Cell, w.Writer); err != nil {
		return err
	}
	w.withdrawn()
	return nil
}

// reservedLeft returns the reservation writes waiting to be sent and the
// units of those that are counts.
func (r *replayer) reservedLeft() (writes, units int64) {
	r.reservedMu.Lock()
	defer r.reservedMu.Unlock()
	for _, w := range r.reserved {
		if !w.withdraw {
			units += w.Sent
		}
	}
	return int64(len(r.reserved)), units
}

// round turns the parked lists whose turn is due, reads the cells queued
// for a read (see readLater), takes every dirty cell, hands them to the
// workers in batches and waits for the batches to finish. ctx bounds the
// origin calls (each also by ReplayTimeout). It reports whether there was
// anything.
func (r *replayer) round(ctx context.Context, jobs chan<- replayJob) bool {
	r.turnIfDue(r.l.cfg.Clock().UnixMilli())
	r.l.readQueued(ctx)
	reserved := r.sendReserved(ctx)
	c := r.head.Swap(nil)
	if c == nil {
		r.reportBacklog()
		return reserved
	}
	r.reportBacklog()
	var done sync.WaitGroup
	r.batches(c, func(batch []*cell) {
		done.Add(1)
		jobs <- replayJob{ctx: ctx, cells: batch, done: &done}
	})
	done.Wait()
	r.reportBacklog()
	return true
}

// batches walks the popped stack from c and hands each batch of at most
// ReplayBatch cells to each, a new slice every time (each may keep it), of
// the batch's length: most rounds replay far fewer cells than a batch.
// Every cell's link is read before each gets its batch, since flush can
// clear the flag and requeue the cell.
func (r *replayer) batches(c *cell, each func([]*cell)) {
	size := r.l.cfg.ReplayBatch
	for c != nil {
		n := 0
		for d := c; d != nil && n < size; d = d.next {
			n++
		}
		batch := make([]*cell, n)
		for i := range batch {
			batch[i], c = c, c.next
		}
		each(batch)
	}
}

// final replays, parked cells included, until nothing is left or
// FlushTimeout has passed: one deadline bounds every call of the final
// flush together. What could not
// be replayed is logged and counted.
//
// Nothing is left when no cell is queued and no mark is between its
// flag and its push (marking, read before the stack): such a mark may
// hold the cell of increments whose own mark found the flag set, the
// requeue of a write that Close cut short included. A mark that starts
// after that read is an admission's that finds the limiter closed and
// takes its increment back (see Limiter.queued).
func (r *replayer) final(jobs chan<- replayJob) {
	ctx, cancel := context.WithTimeout(context.Background(), r.l.cfg.FlushTimeout)
	defer cancel()
	r.unparkAll()
	for ctx.Err() == nil {
		if !r.round(ctx, jobs) {
			if r.marking.Load() == 0 && r.head.Load() == nil {
				break
			}
			runtime.Gosched() // a mark is about to push its cell
			continue
		}
		if writes, _ := r.reservedLeft(); r.head.Load() == nil && writes == 0 {
			continue // everything sent: the next round ends the loop
		}
		pause := time.NewTimer(r.backoff()) // cells queued again: not at once
		select {
		case <-ctx.Done():
		case <-pause.C:
		}
		pause.Stop()
	}
	if cells, lost := r.lost(); cells > 0 {
		r.l.cfg.Logger.Error("sluice: origin unreachable at close; increments not replayed",
			"cells", cells, "increments", lost)
		r.l.cfg.Observer.Dropped(dropClose, int(cells), lost)
	}
}

// flushNow replays every queued or parked cell on the caller's
// goroutine, in batches of ReplayBatch, and reports whether anything was
// queued.
func (r *replayer) flushNow() bool {
	r.unparkAll()
	return r.sendQueued()
}

// roundNow runs one round on the caller's goroutine: it turns the parked
// lists whose turn is due, reads the cells queued for a read (see
// readLater) and replays the queued cells, in batches of ReplayBatch. It
// reports whether anything was queued for replay.
func (r *replayer) roundNow() bool {
	r.turnIfDue(r.l.cfg.Clock().UnixMilli())
	r.l.readQueued(context.Background())
	return r.sendQueued()
}

// sendQueued replays the queued cells on the caller's goroutine, in
// batches of ReplayBatch, and reports whether anything was queued.
func (r *replayer) sendQueued() bool {
	c := r.head.Swap(nil)
	if c == nil {
		return false
	}
	r.batches(c, func(cells []*cell) { r.flush(context.Background(), cells) })
	return true
}

// lost returns the cells still queued or parked for replay with
// increments the origin has not confirmed, and those increments, with the
// reservation writes not sent (each counted as a cell). A cell queued with
// nothing unconfirmed lost nothing: an admission that raced Close was
// taken back after it queued the cell (see Limiter.queued).
func (r *replayer) lost() (cells, increments int64) {
	cells, increments = r.reservedLeft()
	count := func(c *cell) {
		if n := c.unconfirmed(); n > 0 {
			increments += n
			cells++
		}
	}
	for c := r.head.Load(); c != nil; c = c.next {
		count(c)
	}
	r.parkMu.Lock()
	defer r.parkMu.Unlock()
	for _, pl := range r.lists {
		for _, c := range append(pl.waiting[:len(pl.waiting):len(pl.waiting)], pl.parked...) {
			if c.flags.Load()&flagDirty == 0 { // counted above otherwise
				count(c)
			}
		}
	}
	return cells, increments
}

// flush writes the counts of cells in one origin call and merges the
// totals; cells the call could not confirm are queued again.
func (r *replayer) flush(ctx context.Context, cells []*cell) {
	deltas := make([]origin.Delta, 0, len(cells))
	sent := cells[:0]
	for _, c := range cells {
		c.clearFlag(flagDirty)
		r.backlog.Add(-1)
		if c.flags.Load()&flagDeciding != 0 {
			r.mark(c) // the decision carries its count; it queues c again when it ends
			continue
		}
		if n := c.admitted.Load(); n > c.acked.Load() {
			c.setFlag(flagWriting)
			deltas = append(deltas, origin.Delta{Cell: r.l.cells.m.KeyOf(c), Writer: c.writer, Sent: n})
			sent = append(sent, c)
		}
	}
	if len(deltas) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, r.l.cfg.ReplayTimeout)
	defer cancel()
	start := time.Now()
	totals, err := r.l.origin.Apply(ctx, deltas)
	r.l.cfg.Observer.Replayed(len(deltas), time.Since(start), err)
	var refused *origin.CellErrors
	if err != nil && !errors.As(err, &refused) {
		r.failed(deltas, sent, err)
		return
	}
	if r.fails.Swap(0) > 0 {
		r.l.cfg.Logger.Info("sluice: replay to origin recovered")
	}
	for i, c := range sent {
		if cellErr, ok := cellError(refused, i); ok {
			c.flags.Or(flagInDoubt)
			c.clearFlag(flagWriting)
			r.refused(deltas[i], c, cellErr)
			continue
		}
		c.resetFailures()
		c.confirm(deltas[i].Sent)
		c.mergeWrite(totals[i].Count, deltas[i].Sent)
		c.raiseImported(totals[i].Imported)
		r.l.changed(c)
		c.settled(deltas[i].Sent)
		c.clearFlag(flagWriting)
	}
}

// failed handles a replay call that failed as a whole: its cells are
// queued again, except those that expired meanwhile.
func (r *replayer) failed(deltas []origin.Delta, cells []*cell, err error) {
	if r.fails.Add(1) == 1 {
		r.l.cfg.Logger.Warn("sluice: replay to origin failed; keeping increments for retry",
			"cells", len(deltas), "err", err)
	}
	now := r.l.cfg.Clock().UnixMilli()
	for i, c := range cells {
		c.flags.Or(flagInDoubt)
		c.clearFlag(flagWriting)
		if expired(deltas[i].Cell, now) {
			r.drop(dropExpired, deltas[i], c, err)
			continue
		}
		r.mark(c)
	}
}

// refused handles a cell that failed on its own: it is retried, until its
// window has passed or, if the origin refused it (rather than could not
// reach its store), up to maxCellFailures times in a row; then its
// increments are dropped.
func (r *replayer) refused(d origin.Delta, c *cell, err error) {
	if !errors.Is(err, origin.ErrUnavailable) {
		c.failedAlone()
	}
	if c.failures() < maxCellFailures && !expired(d.Cell, r.l.cfg.Clock().UnixMilli()) {
		r.mark(c)
		return
	}
	reason := dropRefused
	if c.failures() < maxCellFailures {
		reason = dropExpired // unavailable (its master, say) until the window passed
	}
	r.drop(reason, d, c, err)
}

// drop gives up on the unconfirmed increments of c: they are counted and
// logged, and c is confirmed as it stands so that it is not sent again.
func (r *replayer) drop(reason string, d origin.Delta, c *cell, err error) {
	lost := c.unconfirmed()
	c.confirm(c.admitted.Load())
	c.resetFailures()
	r.l.cfg.Observer.Dropped(reason, 1, lost)
	r.l.cfg.Logger.Warn("sluice: increments dropped; not replayed to the origin",
		"reason", reason, "namespace", d.Cell.Namespace, "increments", lost, "err", err)
}

// cellError returns the error of delta i if the origin refused it alone
// (refused may be nil: nothing was refused).
func cellError(refused *origin.CellErrors, i int) (error, bool) {
	if refused == nil {
		return nil, false
	}
	err, ok := refused.Failed[i]
	return err, ok
}

// expired reports whether no decision at now reads cell k any more: it is
// older than the previous window.
func expired(k origin.Cell, now int64) bool {
	return (k.Sequence+2)*k.Duration.Milliseconds() <= now
}
