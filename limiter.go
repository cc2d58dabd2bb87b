// Package sluice is a distributed rate limiter: an embeddable library that
// decides from local memory and converges across nodes and regions in the
// background.
//
// A [Limiter] counts requests per counter, identified by (workspace,
// namespace, identifier, duration), in fixed window cells that it evaluates as
// a sliding window: the current cell counts fully, the previous cell by the
// fraction of it still inside the window. One process with the embedded
// default makes exactly the decisions of that model (see docs/consistency.md).
//
// Decisions never wait on the network except for a counter's first decision
// (a cold counter is hydrated from the regional origin, with a timeout) and
// while a counter is in strict mode after a denial. Accepted increments are
// replayed to the origin asynchronously, coalesced per cell. A failing origin
// degrades the limiter to local decisions; it never fails a request.
//
//	l, err := sluice.New(sluice.Config{}) // embedded default
//	res, err := l.Ratelimit(ctx, sluice.Request{
//		Namespace: "api", Identifier: "user-42", Limit: 100, Duration: time.Minute, Cost: 1,
//	})
package sluice

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
)

// ErrClosed is returned by decisions on a [Limiter] after Close.
var ErrClosed = errors.New("sluice: limiter closed")

// Limiter makes rate-limit decisions. It is safe for concurrent use by many
// goroutines. Create one with [New] and release it with Close.
type Limiter struct {
	cfg    Config
	origin origin.Origin // nil: the limiter is its own origin
	cells  *cellTable
	replay *replayer // nil without an origin

	closed    atomic.Bool
	closeOnce sync.Once
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// New returns a Limiter for cfg, with defaults for its zero fields, and starts
// its background goroutines (the janitor, and the replay workers when there is
// an origin). Config{} is the embedded default.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	l := &Limiter{cfg: cfg, origin: cfg.Origin, cells: newCellTable(), cancel: cancel}
	if l.origin != nil {
		l.replay = newReplayer(l)
		l.wg.Go(func() { l.replay.run(ctx) })
	}
	l.wg.Go(func() { l.runJanitor(ctx) })
	return l, nil
}

// Close stops the background goroutines after replaying every pending
// increment to the origin (bounded by FlushTimeout). It is idempotent.
// Decisions that start after Close return ErrClosed; stop sending requests
// before calling it so that every accepted increment is replayed.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.cancel()
		l.wg.Wait()
	})
	return nil
}

// Ratelimit decides one request. Invalid requests return an error wrapping
// [ErrInvalidRequest]; a denial is a Response with Success false, not an
// error. Origin failures never surface here: the decision falls back to local
// state. ctx bounds the synchronous origin reads this call may make.
func (l *Limiter) Ratelimit(ctx context.Context, r Request) (Response, error) {
	if l.closed.Load() {
		return Response{}, ErrClosed
	}
	q, err := resolve(&r, l.cfg.Clock)
	if err != nil {
		return Response{}, err
	}
	cur, prev := l.cellsFor(ctx, &q)
	o := l.apply(&q, cur, prev, false)
	if o.Success && q.cost > 0 {
		l.accepted(cur, q.cost)
	}
	return q.response(o), nil
}

// apply decides q on its cells and, if it passes, adds its cost to the
// current cell with one CAS, deciding again when another request changed the
// count since it was read. A denial changes no count and starts strict mode.
// With speculative, the cost is announced in cur.speculative before the
// count can include it, so that whoever reads regional-speculative never sees
// it, and stays there until the caller commits or rolls back.
func (l *Limiter) apply(q *resolved, cur, prev *cell, speculative bool) window.Outcome {
	if speculative {
		cur.speculative.Add(q.cost)
	}
	for {
		regional := cur.regional.Load()
		o := q.decide(regional+cur.imported.Load(), prev.count())
		if !o.Success {
			if speculative {
				cur.speculative.Add(-q.cost)
			}
			l.denied(q, cur)
			return o
		}
		if q.cost == 0 || cur.regional.CompareAndSwap(regional, regional+q.cost) {
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
// cell, strict mode, or a stale warm cell.
func (l *Limiter) cellsFor(ctx context.Context, q *resolved) (cur, prev *cell) {
	q.hash = l.cells.keyHash(q.key)
	curKey, prevKey := q.current(), q.previous()
	if l.origin == nil {
		// The limiter is its own origin: every cell is born in sync.
		return l.cells.loadOrCreate(q.hash, curKey, 1), l.cells.load(q.hash, prevKey)
	}
	cur = l.cells.loadOrCreate(q.hash, curKey, 0)
	prev = l.cells.load(q.hash, prevKey)
	switch synced := cur.syncedAt.Load(); {
	case synced == 0:
		l.hydrate(ctx, q, cur)
	case max(cur.strict(), prev.strict()) > q.t:
		l.read(ctx, q, ReadStrict, cur)
	case q.t-synced >= l.cfg.RefreshAfter.Milliseconds() && cur.setFlag(flagRefreshing):
		l.read(ctx, q, ReadRefresh, cur)
		cur.clearFlag(flagRefreshing)
	default:
		return cur, prev
	}
	if prev == nil { // the read may have created it
		prev = l.cells.load(q.hash, prevKey)
	}
	return cur, prev
}

// hydrate performs the first origin read of a cold cell. Concurrent callers
// wait for the one read in flight (single flight), bounded by HydrateTimeout.
func (l *Limiter) hydrate(ctx context.Context, q *resolved, cur *cell) {
	mu := l.cells.hydrationLock(q.hash, q.pos.Seq)
	mu.Lock()
	defer mu.Unlock()
	if cur.syncedAt.Load() != 0 {
		return
	}
	l.read(ctx, q, ReadHydrate, cur)
}

// read loads the current and previous cells of q's counter from the origin in
// one round trip and merges them into local state. On failure the cell is
// still marked as read, so a failing origin costs each counter at most one
// timeout per RefreshAfter; decisions go on from local state.
func (l *Limiter) read(ctx context.Context, q *resolved, reason ReadReason, cur *cell) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.HydrateTimeout)
	defer cancel()
	start := time.Now()
	counts, err := l.origin.Load(ctx, q.key, q.pos.Seq)
	l.cfg.Observer.OriginRead(reason, time.Since(start), err)
	if err == nil {
		cur.merge(counts.Current)
		if counts.Previous > 0 {
			prev := l.cells.loadOrCreate(q.hash, q.previous(), max(q.t, 1))
			prev.merge(counts.Previous)
		}
	} else if !errors.Is(ctx.Err(), context.Canceled) { // the caller gave up: nothing to report
		l.cfg.Logger.Debug("sluice: origin read failed; deciding locally",
			"reason", reason, "namespace", q.key.Namespace, "err", err)
	}
	cur.syncedAt.Store(max(q.t, 1))
}

// denied records a denial: the counter enters strict mode until t+d, unless
// the request's cost alone exceeds the limit.
func (l *Limiter) denied(q *resolved, cur *cell) {
	if q.cost <= q.limit {
		cur.raiseStrict(q.t + q.pos.D)
	}
}

// accepted records a committed increment of cost on cur for replay.
func (l *Limiter) accepted(cur *cell, cost int64) {
	if l.replay == nil {
		return
	}
	cur.pending.Add(cost)
	l.replay.mark(cur)
}
