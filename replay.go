package sluice

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// maxReplayBackoff caps the pause between replay rounds while the origin
// fails.
const maxReplayBackoff = time.Second

// replayer sends accepted increments to the origin asynchronously. An accepted
// increment adds to its cell's pending count and, if the cell was clean, pushes
// the cell on a lock-free stack. One dispatcher goroutine takes the whole stack
// every ReplayInterval and hands it in batches to a pool of workers, which
// apply each cell's accumulated delta in one pipelined origin call and merge
// the returned totals into local state.
//
// Memory is bounded by the number of dirty cells, not by the number of
// requests: a cell is on the stack at most once, however many increments it
// accumulates. Nothing is dropped: a failed call puts its deltas back, and
// Close replays whatever is left.
type replayer struct {
	l       *Limiter
	head    atomic.Pointer[cell] // stack of dirty cells, linked through cell.next
	backlog atomic.Int64         // cells on the stack or in a batch not yet sent
	wake    chan struct{}
	fails   atomic.Int32 // consecutive failed replay calls
	// inFlight holds, per cell, the replay call that has not returned yet:
	// its increments are no longer pending, maybe not yet in the origin's
	// total. Written under the cell's lock, together with pending, so an
	// origin decision sees every increment exactly once (see settle).
	inFlight sync.Map // *cell → *replayCall
}

type replayJob struct {
	cells []*cell
	done  *sync.WaitGroup
}

func newReplayer(l *Limiter) *replayer {
	return &replayer{l: l, wake: make(chan struct{}, 1)}
}

// mark queues c for replay unless it is queued already. It never blocks.
func (r *replayer) mark(c *cell) {
	if !c.setFlag(flagDirty) {
		return
	}
	for {
		top := r.head.Load()
		c.next = top
		if r.head.CompareAndSwap(top, c) {
			break
		}
	}
	r.backlog.Add(1)
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run is the dispatcher: it owns the worker pool and stops, after a final
// flush, when ctx is done.
func (r *replayer) run(ctx context.Context) {
	jobs := make(chan replayJob)
	var workers sync.WaitGroup
	for range r.l.cfg.ReplayWorkers {
		workers.Go(func() {
			for job := range jobs {
				r.flush(job.cells)
				job.done.Done()
			}
		})
	}
	defer func() {
		r.final(jobs)
		close(jobs)
		workers.Wait()
	}()

	if ticks := r.l.cfg.ReplayTicks; ticks != nil {
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticks:
				r.round(jobs)
			}
		}
	}
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		r.round(jobs)
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

// round takes every dirty cell, hands them to the workers in batches and
// waits for the batches to finish. It reports whether there was anything.
func (r *replayer) round(jobs chan<- replayJob) bool {
	c := r.head.Swap(nil)
	if c == nil {
		return false
	}
	r.l.cfg.Observer.ReplayBacklog(r.backlog.Load())
	var done sync.WaitGroup
	r.batches(c, func(batch []*cell) {
		done.Add(1)
		jobs <- replayJob{cells: batch, done: &done}
	})
	done.Wait()
	return true
}

// batches walks the popped stack from c and hands each batch of at most
// ReplayBatch cells to each, a new slice every time (each may keep it).
func (r *replayer) batches(c *cell, each func([]*cell)) {
	batch := make([]*cell, 0, r.l.cfg.ReplayBatch)
	for c != nil {
		next := c.next // read before flush can clear the flag and requeue c
		batch = append(batch, c)
		if len(batch) == cap(batch) || next == nil {
			each(batch)
			batch = make([]*cell, 0, r.l.cfg.ReplayBatch)
		}
		c = next
	}
}

// final replays until nothing is pending or FlushTimeout has passed, then
// logs what could not be replayed.
func (r *replayer) final(jobs chan<- replayJob) {
	deadline := time.Now().Add(r.l.cfg.FlushTimeout)
	for r.round(jobs) {
		if r.fails.Load() == 0 {
			continue
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(min(r.backoff(), time.Until(deadline)))
	}
	if cells, lost := r.lost(); cells > 0 {
		r.l.cfg.Logger.Error("sluice: origin unreachable at close; increments not replayed",
			"cells", cells, "increments", lost)
	}
}

// flushNow replays every queued cell on the caller's goroutine, in batches
// of ReplayBatch, and reports whether anything was queued.
func (r *replayer) flushNow() bool {
	c := r.head.Swap(nil)
	if c == nil {
		return false
	}
	r.batches(c, r.flush)
	return true
}

// lost returns the cells still queued for replay and their increments.
func (r *replayer) lost() (cells, increments int64) {
	for c := r.head.Load(); c != nil; c = c.next {
		increments += c.pending.Load()
		cells++
	}
	return cells, increments
}

// flush replays the pending deltas of cells in one origin call.
func (r *replayer) flush(cells []*cell) {
	deltas := make([]origin.Delta, 0, len(cells))
	sent := cells[:0]
	for _, c := range cells {
		c.clearFlag(flagDirty)
		r.backlog.Add(-1)
		if n := r.send(c); n > 0 {
			deltas = append(deltas, origin.Delta{Cell: r.l.cells.m.KeyOf(c), Count: n})
			sent = append(sent, c)
		}
	}
	if len(deltas) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.l.cfg.ReplayTimeout)
	defer cancel()
	start := time.Now()
	totals, err := r.l.origin.Apply(ctx, deltas)
	r.l.cfg.Observer.Replayed(len(deltas), time.Since(start), err)
	if err != nil {
		if r.fails.Add(1) == 1 {
			r.l.cfg.Logger.Warn("sluice: replay to origin failed; keeping increments for retry",
				"cells", len(deltas), "err", err)
		}
		for i, c := range sent {
			r.returned(c, deltas[i].Count)
			r.mark(c)
		}
		return
	}
	if r.fails.Swap(0) > 0 {
		r.l.cfg.Logger.Info("sluice: replay to origin recovered")
	}
	for i, c := range sent {
		c.merge(totals[i])
		r.returned(c, 0)
	}
}

// replayCall is one cell's replay in flight.
type replayCall struct {
	n    int64         // the increments sent
	done chan struct{} // closed once the call returned and its total merged
}

// send moves c's pending increments in flight and returns them.
func (r *replayer) send(c *cell) int64 {
	c.lock()
	defer c.unlock()
	n := c.pending.Swap(0)
	if n > 0 {
		r.inFlight.Store(c, &replayCall{n: n, done: make(chan struct{})})
	}
	return n
}

// returned ends c's replay in flight; unsent increments (after a failure)
// go back to pending.
func (r *replayer) returned(c *cell, unsent int64) {
	c.lock()
	v, _ := r.inFlight.LoadAndDelete(c)
	c.pending.Add(unsent)
	c.unlock()
	if f, ok := v.(*replayCall); ok {
		close(f.done)
	}
}

// settle moves c's pending increments to the caller, which applies them
// itself (an origin decision). A replay of c still in flight is waited for
// until ctx ends, so that the decision finds its increments at the origin
// (and its unsent ones, after a failure, among the pending it takes). If
// ctx ends first, or without wait, the replay's increments are returned as
// inFlight, for the decision to count but not apply: twice, if the replay
// has landed, which denies more, never less. A limiter whose replay is
// driven from outside (ReplayTicks) does not wait: only the driver can let
// that replay return, and it may be the caller.
func (r *replayer) settle(ctx context.Context, c *cell, wait bool) (pending, inFlight int64) {
	for {
		c.lock()
		pending += c.pending.Swap(0)
		v, ok := r.inFlight.Load(c)
		c.unlock()
		if !ok {
			return pending, 0
		}
		f := v.(*replayCall)
		if !wait {
			return pending, f.n
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return pending, f.n
		}
	}
}
