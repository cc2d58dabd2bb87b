// Package sluice is a distributed rate limiter: an embeddable library that
// decides from local memory and converges across nodes and regions in the
// background.
//
// A [Limiter] counts requests per counter, identified by (workspace, namespace,
// identifier, duration), in fixed window cells that it evaluates as a sliding
// window: the current cell counts fully, the previous cell by the fraction of
// it still inside the window. One process with the embedded default makes
// exactly the decisions of that model (see docs/decisions.md).
//
// Decisions never wait on the network except for a counter's first decision
// (a cold counter is hydrated from the regional origin), a periodic refresh of
// a warm one, and a request its local view would admit while the counter is
// in strict mode after a denial or close to its limit: the origin then
// decides it atomically.
// A denial never waits: the local view never exceeds what the region has
// admitted, so what it denies the region would deny too. Accepted increments
// are replayed to the origin asynchronously, coalesced per cell. A failing
// origin degrades the limiter to local decisions; it never fails a request.
//
//	l, err := sluice.New(sluice.Config{}) // embedded default
//	res, err := l.Ratelimit(ctx, sluice.Request{
//		Namespace: "api", Identifier: "user-42", Limit: 100, Duration: time.Minute, Cost: 1,
//	})
package sluice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/internal/flight"
	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
)

// ErrClosed is returned by decisions on a [Limiter] after Close.
var ErrClosed = errors.New("sluice: limiter closed")

// ErrNotFlushed is returned, wrapped with what was lost, by Close when
// accepted increments could not be replayed to the origin in time.
var ErrNotFlushed = errors.New("sluice: increments not flushed")

// Limiter makes rate-limit decisions. It is safe for concurrent use by many
// goroutines. Create one with [New] and release it with Close.
type Limiter struct {
	cfg      Config
	drive    drive.Options      // set by the simulator and tests only
	nowMilli func() int64       // the clock of requests without a Time
	origin   origin.Origin      // nil: the limiter is its own origin
	loader   origin.BatchLoader // the origin, if it reads several counters in one round trip
	cells    *cellTable
	replay   *replayer // nil without an origin

	reads    flight.Group[origin.Cell] // hydrations and strict reads, one per cell
	later    readsLater                // cold cells read with the next replay round
	deciders deciders                  // strict-mode decisions at the origin

	// The global layer (nil channels without one).
	globalMu       sync.Mutex // serialises rounds; guards global
	global         globalState
	denials        chan global.Denial // denials waiting to be written
	denialsFull    chan struct{}      // DenialBatch denials are waiting
	denialsDropped atomic.Int64       // denials dropped since the last flush
	denialsSince   atomic.Int64       // when the oldest queued denial was queued (Unix ms; 0: none)
	changes        *changedCells      // cells the publication rule looks at again (nil without global counters)

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// New returns a Limiter for cfg, with defaults for its zero fields, and starts
// its background goroutines (the janitor, and the replay workers when there is
// an origin). Config{} is the embedded default.
func New(cfg Config) (*Limiter, error) {
	return newLimiter(cfg, drive.Options{})
}

// newLimiter is New with the settings only a driver sets.
func newLimiter(cfg Config, o drive.Options) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.PublishShare < 0 || o.PublishShare > 1 {
		return nil, fmt.Errorf("%w: PublishShare %v is outside [0, 1]", ErrInvalidConfig, o.PublishShare)
	}
	nowMilli := newMonoClock().nowMilli
	if clock := cfg.Clock; clock != nil {
		nowMilli = func() int64 { return clock().UnixMilli() }
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	l := &Limiter{cfg: cfg, drive: o, nowMilli: nowMilli, origin: cfg.Origin,
		cells: newCellTable(int64(cfg.MaxCounters)), cancel: cancel}
	if l.origin != nil {
		l.replay = newReplayer(l)
		l.wg.Go(func() { l.replay.run(ctx) })
		l.loader, _ = l.origin.(origin.BatchLoader)
		if p, ok := l.origin.(origin.Pusher); ok {
			p.OnPush(l.mergeRemote)
		}
	}
	if cfg.Global != nil {
		l.global.cfg = *cfg.Global
		l.global.published = make(map[origin.Cell]stored)
		if !cfg.Global.DisableCounters {
			l.changes = &changedCells{}
		}
		l.global.holder = fmt.Sprintf("%s-%016x", cfg.Region, rand.Uint64())
		if r, ok := l.origin.(origin.Region); ok {
			l.global.region = r
		} else {
			l.global.region = &localRegion{l: l, since: cfg.Clock().UnixMilli()}
		}
		if !cfg.Global.DisableDenials {
			l.denials = make(chan global.Denial, denialQueue)
			l.denialsFull = make(chan struct{}, 1)
		}
		l.wg.Go(func() { l.runGlobal(ctx) })
	}
	l.wg.Go(func() { l.runJanitor(ctx) })
	return l, nil
}

// Close stops the background goroutines after replaying every pending
// increment to the origin. It is idempotent. Decisions that start after
// Close return ErrClosed, and so does a decision running as Close starts
// that would admit a request after it: nothing is admitted that the final
// replay may miss. Close waits for the origin calls of running decisions
// (each bounded by OriginTimeout); FlushTimeout bounds the final replay as
// a whole. If some increments could not be replayed, Close returns an
// error wrapping [ErrNotFlushed] that says how many (every call returns the
// same error).
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.reads.Close()
		l.deciders.close()
		l.cancel()
		l.wg.Wait()
		if l.replay != nil {
			if cells, lost := l.replay.lost(); cells > 0 {
				l.closeErr = fmt.Errorf("%w: %d increments of %d cells", ErrNotFlushed, lost, cells)
			}
		}
	})
	return l.closeErr
}

// Ratelimit decides one request. Invalid requests return an error wrapping
// [ErrInvalidRequest]; a denial is a Response with Success false, not an
// error. Origin failures never surface here: the decision falls back to local
// state. One deadline, OriginTimeout from the first wait (or ctx's, if
// sooner), bounds everything the call may wait for on the origin together.
func (l *Limiter) Ratelimit(ctx context.Context, r Request) (res Response, err error) {
	var q resolved
	if err := resolve(&q, &r, l.nowMilli); err != nil {
		return Response{}, err
	}
	if l.closed.Load() {
		return Response{}, ErrClosed
	}
	q.hash = l.cells.keyHash(&q.cell.Key)
	w := waits{parent: ctx, timeout: l.cfg.OriginTimeout}
	o, err := l.decide(&w, &q)
	w.release()
	if err != nil {
		return Response{}, err
	}
	q.response(&res, o) // filled in place: a copy would stall on its fields
	return res, nil
}

// decide decides q, at the origin when the rules ask for it, with w's
// deadline on every origin wait.
func (l *Limiter) decide(w *waits, q *resolved) (window.Outcome, error) {
	cur, prev := l.cellsFor(w, q)
	if l.atOrigin(q, cur, prev) {
		o, ok, tk := l.decideAtOrigin(w.ctx(), q, cur, prev)
		if ok {
			return o, nil
		}
		// Decided here instead, beside the origin decision that may
		// still be in flight on the cell.
		if o = l.applyBeside(q, cur, prev, tk); o.Success && q.cost > 0 && !l.queued(q, cur, o.Current) {
			return window.Outcome{}, ErrClosed
		}
		return o, nil
	}
	o := l.apply(q, cur, prev, applyCommitted)
	if o.Success && q.cost > 0 && !l.queued(q, cur, o.Current) {
		return window.Outcome{}, ErrClosed
	}
	return o, nil
}

// waits gives the origin waits of one request one deadline: timeout from
// the first wait, or parent's deadline if sooner. The context is made on
// first use, so a request that never waits costs nothing.
type waits struct {
	parent  context.Context
	timeout time.Duration
	bounded context.Context
	cancel  context.CancelFunc
}

// ctx returns the request's bounded context.
func (w *waits) ctx() context.Context {
	if w.bounded == nil {
		w.bounded, w.cancel = context.WithTimeout(w.parent, w.timeout)
	}
	return w.bounded
}

// release frees the bounded context, if one was made.
func (w *waits) release() {
	if w.cancel != nil {
		w.cancel()
	}
}

// atOrigin reports whether q must be decided by the origin: it spends
// something, the local view would admit it, the origin has not failed this
// cell recently, and either the counter is in strict mode or q would bring
// the local view within OriginMargin × limit of the limit, where another
// node's admissions the local view has not seen yet decide who gets the last
// units. A request the local view denies is denied locally (apply does it),
// because the local view never exceeds what the region has admitted.
func (l *Limiter) atOrigin(q *resolved, cur, prev *cell) bool {
	if l.origin == nil || q.cost == 0 || cur.backoffUntil.Load() > q.t {
		return false
	}
	o := q.decide(cur.count(), prev.count())
	switch {
	case !o.Success:
		return false
	case max(cur.strict(), prev.strict()) > q.t:
		return true
	default:
		return l.cfg.OriginMargin > 0 && o.Current > q.limit-int64(l.cfg.OriginMargin*float64(q.limit))
	}
}

// How apply counts an admission.
type applyMode int

const (
	applyCommitted   applyMode = iota // a single request's: committed at once
	applySpeculative                  // a batch's: may still roll back (cell.speculative)
	applyReserved                     // a batch's, to be reserved at the origin (see RatelimitMany)
)

// apply decides q on its cells and, if it passes, adds its cost to the
// current cell with one CAS, deciding again when another request changed the
// count since it was read. A denial changes no count and starts strict mode.
// A batch's increment (applySpeculative, applyReserved) is made under the
// cell's lock and counts the costs an origin decision on cur has in flight
// (cur.deciding) as spent: the batch must not take units the origin is
// handing out. A speculative one is also recorded in cur.speculative,
// together with the count, so that a merge never sees one without the
// other; it stays there until the caller commits or rolls back. A reserved
// one is in the count only: the origin's total will hold it (see
// cell.reserveAside). With an origin, a committed increment is made under
// the lock too, and counts the origin decision in flight as spent: it
// enters the count and the writer's count in one step, so a decision
// starting meanwhile either sends it (cell.reserve reads the writer's
// count) or is counted here. Were it in the count first and the writer's
// count later, a request that saw it could be asked of the origin with a
// writer's count that lacks it, and the origin hand out its unit again.
func (l *Limiter) apply(q *resolved, cur, prev *cell, mode applyMode) window.Outcome {
	var deciding int64
	if q.cost > 0 && (mode != applyCommitted || l.replay != nil) {
		cur.lock()
		defer cur.unlock()
		deciding = cur.inFlight()
	}
	for {
		regional := cur.regional.Load()
		o := q.decide(window.Add(regional, window.Add(cur.imported.Load(), deciding)), prev.count())
		if !o.Success {
			l.denied(q, cur)
			return o
		}
		if q.cost == 0 {
			return o
		}
		if cur.regional.CompareAndSwap(regional, regional+q.cost) {
			switch {
			case mode == applySpeculative:
				cur.speculative.Add(q.cost)
			case mode == applyCommitted && l.replay != nil:
				cur.admitted.Add(q.cost)
			}
			l.changed(cur)
			return o
		}
	}
}

// decide applies the sliding window to the current and previous cell counts.
func (q *resolved) decide(cur, prev int64) window.Outcome {
	return window.Decide(q.pos.Before(cur, prev), q.limit, q.cost)
}

// cellsFor returns the current cell of q's counter, created if needed, and
// the previous cell if it exists. With an origin it first brings them in line
// with the origin where the rules ask for a synchronous read: a cold current
// cell, or a warm cell whose last read is older than RefreshAfter, unless
// the local view denies q already: the local view never exceeds what the
// region has admitted, so the region denies it too, and a denial never
// waits. q.hash must be set.
func (l *Limiter) cellsFor(w *waits, q *resolved) (cur, prev *cell) {
	cur = l.cellsHere(q)
	prev = l.cells.loadPrevious(q.hash, &q.cell)
	return cur, l.sync(w, q, cur, prev)
}

// sync brings q's cells, cur and prev (nil if absent), in line with the
// origin where the rules ask for a synchronous read (see cellsFor), and
// returns the previous cell: prev, or the one the read created.
func (l *Limiter) sync(w *waits, q *resolved, cur, prev *cell) *cell {
	if l.origin == nil {
		return prev
	}
	synced := cur.syncedAt.Load()
	stale := synced == 0 || q.t-synced >= l.cfg.RefreshAfter.Milliseconds()
	if !stale || !q.decide(cur.count(), prev.count()).Success {
		return prev
	}
	switch {
	case synced == 0 && l.readLater(q, cur, prev):
		return prev
	case synced == 0:
		l.sharedRead(w.ctx(), q, readHydrate, cur)
	case cur.setFlag(flagRefreshing):
		l.read(w.ctx(), q, readRefresh, cur)
		cur.clearFlag(flagRefreshing)
	default:
		return prev
	}
	if prev == nil { // the read may have created it
		prev = l.cells.loadPrevious(q.hash, &q.cell)
	}
	return prev
}

// cellsHere returns the current cell of q's counter, created if needed,
// and records its use, with no origin read. Without an origin every cell
// is born in sync: the limiter is its own origin.
func (l *Limiter) cellsHere(q *resolved) *cell {
	synced := int64(0)
	if l.origin == nil {
		synced = 1
	}
	cur := l.cells.loadOrCreate(q.hash, &q.cell, synced)
	l.used(cur, q)
	return cur
}

// used records that q uses cur: for eviction (least recently used last) and,
// with a global layer, the limit its publication rule compares with. Each
// is written only when it changes, so a hot cell costs loads.
func (l *Limiter) used(cur *cell, q *resolved) {
	cur.touch()
	if l.cfg.Global != nil && cur.limit.Load() != q.limit {
		cur.limit.Store(q.limit)
		l.changed(cur)
	}
}

// sharedRead reads cur's counter from the origin once for every concurrent
// caller (single flight per cell). A caller waits for the read at most until
// its ctx ends; giving up does not cancel the read for the others. A cold
// cell that another caller has hydrated meanwhile is not read again.
func (l *Limiter) sharedRead(ctx context.Context, q *resolved, reason string, cur *cell) {
	detached := context.WithoutCancel(ctx) // keeps the caller's trace, not its deadline
	rq := *q
	// Do fails only when the caller gave up or Close has started: the
	// request then goes on from local state, and an admission after Close
	// is refused where it is recorded (see queued).
	_ = l.reads.Do(ctx, q.current(), func() {
		if reason == readHydrate && cur.syncedAt.Load() != 0 {
			return
		}
		l.read(detached, &rq, reason, cur)
	})
}

// read loads the current and previous cells of q's counter from the origin in
// one round trip, bounded by OriginTimeout, and merges them into local
// state. On failure the cell is still marked as read and backed off for
// OriginBackoff, so a failing origin costs each counter at most one timeout
// per RefreshAfter and no strict decision right after it; decisions go on
// from local state.
func (l *Limiter) read(ctx context.Context, q *resolved, reason string, cur *cell) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.OriginTimeout)
	defer cancel()
	start := time.Now()
	counts, err := l.origin.Load(ctx, q.cell.Key, q.pos.Seq)
	l.cfg.Observer.OriginRead(reason, time.Since(start), err)
	l.loaded(q, reason, cur, counts, err)
}

// loaded merges the counts of q's counter read from the origin, or the
// read's failure, into local state (see read).
func (l *Limiter) loaded(q *resolved, reason string, cur *cell, counts origin.Counts, err error) {
	switch {
	case err == nil:
		l.mergeCounts(q, cur, counts)
	case !errors.Is(err, context.Canceled):
		// As after a failed decision: the counter's strict requests are
		// decided locally for a while rather than wait on the origin again.
		cur.backoffUntil.Store(q.t + l.cfg.OriginBackoff.Milliseconds())
		l.originFailed(q, reason, err)
	}
	cur.syncedAt.Store(max(q.t, 1))
}

// mergeCounts raises q's current and previous cells to totals read from
// the origin, and their imported counts to the origin's.
func (l *Limiter) mergeCounts(q *resolved, cur *cell, counts origin.Counts) {
	cur.mergeRead(counts.Current)
	cur.raiseImported(counts.Imported.Current)
	l.changed(cur)
	l.mergePrevious(q, counts)
}

// mergePrevious raises q's previous cell to a total read from the origin,
// and its imported count to the origin's, creating it if needed. With a
// global layer, a previous cell that no request used here takes q's limit,
// the limit its publication rule compares with: with none, the rule would
// take it as over its limit and publish the region's count at once,
// whatever share of the headroom it is (a fifth of the rows of scale-1m
// over two windows were those).
func (l *Limiter) mergePrevious(q *resolved, counts origin.Counts) {
	if counts.Previous <= 0 && counts.Imported.Previous <= 0 {
		return
	}
	pk := q.previous()
	prev := l.cells.loadOrCreate(q.hash, &pk, max(q.t, 1))
	prev.mergeRead(counts.Previous)
	prev.raiseImported(counts.Imported.Previous)
	if l.cfg.Global != nil {
		prev.limit.CompareAndSwap(0, q.limit)
	}
	l.changed(prev)
}

// originFailed logs a failed synchronous origin call at debug level (a
// failing origin shows in metrics and in the origin's own logs).
func (l *Limiter) originFailed(q *resolved, reason string, err error) {
	if errors.Is(err, context.Canceled) {
		return // the caller gave up: nothing to report
	}
	l.cfg.Logger.Debug("sluice: origin call failed; deciding locally",
		"reason", reason, "namespace", q.cell.Namespace, "err", err)
}

// denied records a denial: the counter enters strict mode until t+d, unless
// the request's cost alone exceeds the limit, and the global layer may
// propagate it.
func (l *Limiter) denied(q *resolved, cur *cell) {
	if q.cost > q.limit {
		return
	}
	cur.raiseStrict(q.t + q.pos.D)
	l.emitDenial(q, cur)
}

// queued queues cur for replay after a committed increment of q's cost,
// which brought q's window to current and is in cur's count as a writer
// already: parked if the cell is far from its limit (see far), queued for
// the next round otherwise. If Close has started meanwhile, its final
// replay may not see the increment: queued then takes it back and reports
// false, and the request gets ErrClosed. (Checked after the increment is
// recorded, so either the final replay sees it or the request sees Close;
// at worst the origin holds an increment of a request that was told
// ErrClosed.)
func (l *Limiter) queued(q *resolved, cur *cell, current int64) bool {
	if l.replay == nil {
		return true
	}
	if list, ok := l.far(q, cur, current); ok {
		l.replay.park(cur, list)
	} else {
		l.replay.mark(cur)
	}
	if !l.closed.Load() {
		return true
	}
	cur.takeBack(q.cost)
	return false
}

// parkedShare is the share of OriginMargin × limit that the increments a
// node has not replayed of one parked cell stay below.
const parkedShare = 1.0 / 16

// far reports whether cur's replay may wait for a parked list after an
// admission of q that brought its window to current, and which: that of
// long windows (replayed RefreshAfter/2 to RefreshAfter later) for a window
// at least RefreshAfter long, that of short windows (4 to 8 replay
// intervals later) for a window at least 8 times as long as its turn, so
// that a parked cell is replayed within a quarter of its window. It may
// when current is below (1 − 2 × OriginMargin) × limit and the
// increments the origin has not confirmed stay below OriginMargin × limit
// / 16. What the other nodes have not seen of a parked cell is then a
// small share of the limit, well before any of them comes within
// OriginMargin of it, where decisions go to the origin and the cell is
// replayed at every round again; so waiting costs accuracy nothing near
// the limit, and far from it saves the origin a write per round. With
// OriginMargin off, nothing is parked.
func (l *Limiter) far(q *resolved, cur *cell, current int64) (list int, ok bool) {
	m := l.cfg.OriginMargin
	switch {
	case m <= 0:
		return 0, false
	case q.pos.D >= l.cfg.RefreshAfter.Milliseconds():
		list = parkLong
	case q.pos.D >= shortWindowTurns*l.replay.turnEvery(parkShort).Milliseconds():
		list = parkShort
	default:
		return 0, false
	}
	limit := float64(q.limit)
	return list, float64(current) < (1-2*m)*limit && float64(cur.unconfirmed()) < m*parkedShare*limit
}
