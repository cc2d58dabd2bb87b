package sluice

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
)

// The global layer: regions converge through a global.Store, never on the
// request path. One goroutine owns the loop: every Interval (±20%) it
// pulls the other regions' counts, publishes this region's, reads the
// denial rows and writes the queued denials; between rounds it writes them
// when the next round would keep one waiting longer than DenialFlush (or as
// soon as DenialBatch rows wait); every CleanupEvery rounds it deletes
// expired rows (one node at a time, by the store's lock).

// denialQueue is the capacity of the queue of denials waiting to be written;
// a denial that finds it full is dropped (and counted), never waited for.
const denialQueue = 4096

// cleanupBatch is the most rows one cleanup statement deletes.
const cleanupBatch = 1000

// regionsActiveFor is how long a region counts as present after it last
// announced itself, in global intervals.
const regionsActiveFor = 6

// announceEvery is how often, in intervals of the limiter's clock, a node
// announces its region, whether it publishes or not: half of
// regionsActiveFor, so that a live region never lapses.
const announceEvery = regionsActiveFor / 2

// publishLag is how many global intervals the publication rule expects a
// region's row to take before the other regions count it: on average half
// an interval to the round of a node that writes it, half to the pulls of
// the other regions' nodes, and the jitter of both. Measured against 0, 1,
// 2 and 3 on scale-1m and the accuracy report's multi-region scenarios
// (docs/consistency.md), 1.5 writes the fewest rows that leave every
// scenario's over-admission at or below the rule before it (1/(2R) of the
// headroom whatever the pace).
const publishLag = 1.5

// paceIntervals is the longest span, in global intervals, over which the
// publication rule measures a region's pace: a counter idle for most of
// its window that bursts near its end is judged by its last three
// intervals, not by the whole window. Without the bound,
// sim.TestLateBurstOverThreeRegions passes 0.7 and 3.0 points more than
// under the rule before the pace counted; with it, less.
const paceIntervals = 3

// globalState is owned by the global loop's goroutine (or by a caller of
// syncGlobal, which takes the same lock).
type globalState struct {
	// cfg is the global layer's configuration with its defaults, set by New
	// and never changed (zero without a global layer).
	cfg GlobalConfig
	// published is, per cell, the highest count of this region known to
	// be stored (what this node published, or a pull read back) and when
	// it was last seen to rise.
	published map[origin.Cell]stored
	// regions is the number of regions present at the last pull (≥ 1).
	regions int
	// cursor and denialCursor are where the last pull and denial sync
	// stopped.
	cursor, denialCursor global.Cursor
	// rounds counts rounds, for the cleanup schedule.
	rounds int
	// announceAt is the time (Unix ms) from which this node announces its
	// region again even with nothing to publish.
	announceAt int64
	// pendingDenials holds the denials drained from the queue and not
	// written yet.
	pendingDenials []global.Denial
}

// stored is a cell's count of this region known to be in the global store,
// and the time (Unix ms, the limiter's clock) when this node last saw it
// rise: when it wrote it, or when a pull read it back higher.
type stored struct {
	count, at int64
}

// GlobalStats describes one round of the global layer, for an [Observer].
type GlobalStats struct {
	Published     int           // count rows written
	Pulled        int           // cells read back
	Regions       int           // regions present
	DenialsSent   int           // denial rows written
	DenialsSynced int           // denial rows applied to local cells
	DenialsLost   int           // denial rows dropped (queue full or write failed)
	DenialsLeft   int           // denial rows not written: another region's row for the cell was just read
	Cleaned       int           // expired rows deleted by this node
	Elapsed       time.Duration // wall time of the round
	Err           error         // the first failure of the round, if any
}

// runGlobal is the global loop. It stops when ctx is done, after a last
// denial flush. Driven by ticks of its own (drive.Options.GlobalTicks), it
// runs rounds only on those ticks, and denials are written in rounds only,
// so that a simulation in virtual time stays deterministic.
//
// On its own timers it also checks the denial queue every DenialFlush, and
// writes it then only if the next round would come too late: later than
// DenialFlush after the oldest denial waiting. Otherwise the round writes
// it, after its read, which leaves out the cells whose row another region
// has written meanwhile (see flushDenials). A full queue (DenialBatch) is
// written at once.
func (l *Limiter) runGlobal(ctx context.Context) {
	defer func() {
		flush, cancel := context.WithTimeout(context.Background(), l.cfg.FlushTimeout)
		defer cancel()
		l.globalMu.Lock()
		defer l.globalMu.Unlock()
		var st GlobalStats
		l.flushDenials(flush, l.cfg.Clock().UnixMilli(), nil, &st)
		if st.DenialsLost > 0 {
			l.cfg.Observer.GlobalRound(st)
		}
	}()
	rounds := l.drive.GlobalTicks
	var flush <-chan time.Time // nil: denials are written in rounds only
	var full <-chan struct{}   // likewise
	var timer *time.Timer
	var nextRound int64 // when timer fires (Unix ms, the limiter's clock)
	if rounds == nil {
		timer = time.NewTimer(l.nextRound(&nextRound))
		defer timer.Stop()
		rounds = timer.C
		if l.denials != nil {
			ticker := time.NewTicker(l.global.cfg.DenialFlush)
			defer ticker.Stop()
			flush, full = ticker.C, l.denialsFull
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-rounds:
			_ = l.syncGlobal(ctx)
			if timer != nil {
				timer.Reset(l.nextRound(&nextRound))
			}
		case <-flush:
			if l.denialsDue(nextRound) {
				l.flushDenialsNow(ctx)
			}
		case <-full:
			l.flushDenialsNow(ctx)
		}
	}
}

// nextRound returns the wait until the next round, the global interval ±
// 20%, and sets *at to when it ends.
func (l *Limiter) nextRound(at *int64) time.Duration {
	d := jitter(l.global.cfg.Interval)
	*at = l.nowMilli() + d.Milliseconds()
	return d
}

// denialsDue reports whether the queued denials are to be written now
// rather than by the round due at nextRound: the oldest of them would wait
// longer than DenialFlush for it.
func (l *Limiter) denialsDue(nextRound int64) bool {
	since := l.denialsSince.Load()
	return since != 0 && nextRound > since+l.global.cfg.DenialFlush.Milliseconds()
}

// jitter returns d ± 20%, so that the nodes of a deployment do not write in
// step.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}

// syncGlobal runs one round of the global layer now: it writes queued
// denials, pulls the other regions' counts, publishes this region's counts,
// announces the region when that is due (every third round), applies new
// denial rows (read with the pull when the store implements
// global.PullerWithDenials and both mechanisms run: one read, not two),
// and every CleanupEvery rounds deletes expired rows. The background loop
// calls it every interval; tests and simulations call it through
// drive.Handle. It returns the first error of the round
// (the round goes on after an error); without a global layer it does
// nothing.
func (l *Limiter) syncGlobal(ctx context.Context) error {
	if l.cfg.Global == nil {
		return nil
	}
	l.globalMu.Lock()
	defer l.globalMu.Unlock()
	start := time.Now()
	now := l.cfg.Clock().UnixMilli()
	var st GlobalStats
	ctx, cancel := context.WithTimeout(ctx, l.global.cfg.Timeout)
	defer cancel()
	both, _ := l.global.cfg.Store.(global.PullerWithDenials)
	if l.global.cfg.DisableCounters || l.global.cfg.DisableDenials {
		both = nil // one read of the two is enough
	}
	var denials []global.Denial // read with the pull, applied after the publish
	if !l.global.cfg.DisableCounters {
		denials = l.pull(ctx, both, now, &st) // first: the rule needs the regions present and the imports
		l.publish(ctx, now, &st)
	}
	l.announce(ctx, now, &st)
	if both == nil && !l.global.cfg.DisableDenials {
		denials = l.readDenials(ctx, now, &st)
	}
	l.applyDenials(denials, &st)
	l.flushDenials(ctx, now, denials, &st)
	l.global.rounds++
	if l.global.rounds%l.global.cfg.CleanupEvery == 0 {
		n, err := l.global.cfg.Store.Cleanup(ctx, now, cleanupBatch)
		st.Cleaned = n
		st.fail(err)
	}
	st.Regions = l.global.regions
	st.Elapsed = time.Since(start)
	l.cfg.Observer.GlobalRound(st)
	if st.Err != nil && !errors.Is(st.Err, context.Canceled) {
		l.cfg.Logger.Debug("sluice: global round failed; regions converge later", "err", st.Err)
	}
	return st.Err
}

// announce announces this node's region to the store when it has not for
// announceEvery intervals, publishing or not: the other regions count a
// region present for regionsActiveFor intervals after it last announced
// itself, so a live region never lapses, and a node pays one statement
// every third round for it, not one a round.
func (l *Limiter) announce(ctx context.Context, now int64, st *GlobalStats) {
	g := &l.global
	if now < g.announceAt {
		return
	}
	if err := g.cfg.Store.Announce(ctx, l.cfg.Region, now); err != nil {
		st.fail(err)
		return
	}
	g.announceAt = now + announceEvery*g.cfg.Interval.Milliseconds()
}

func (st *GlobalStats) fail(err error) {
	if err != nil && st.Err == nil {
		st.Err = err
	}
}

// publish writes this region's committed count of every active cell that
// changed since it was last published and passes the publication rule.
//
// The rule: a region publishes a cell's count once what it holds back (its
// count above what it has stored), together with what it expects to admit
// at its present pace before the other regions count a row, reaches 1/R of
// the cell's headroom, R being the number of regions present and the
// headroom the limit less what this region knows of the window's usage (its
// stored count, the other regions' and the previous cell's weight, up to
// the limit; R is 2 when this region sees no other, so that a region that
// appears within a window finds most of what was spent); see publishable.
// Every region holds back less than 1/R of the headroom it sees by the
// time the others can see its row, so all of them together hold back less
// than all of it: what no other region can see never uses up the limit on
// its own. A counter that grows slowly holds back up to 1/(1.5R) of the
// headroom and writes few rows; one that grows fast publishes at as little
// as 1/(2.5R) of it, before its pace spends the rest unseen. A cell far
// from its limit writes a row only when its count has grown by a sizeable
// share of what is left, or none at all; as the usage nears the limit the
// share shrinks to every change. Rows already stored by another node of
// this region are not written again (see pull).
func (l *Limiter) publish(ctx context.Context, now int64, st *GlobalStats) {
	g := &l.global
	regions := int64(max(g.regions, 2)) // alone, as if one more region were present
	var counts []global.Count
	for k := range g.published {
		if expired(k, now) { // a cell the janitor evicted early is forgotten here too
			delete(g.published, k)
		}
	}
	for k, c := range l.cells.m.All() {
		if expired(k, now) {
			continue // the janitor evicts it
		}
		n, last := c.committed(), g.published[k]
		if n <= last.count || !l.publishable(k, c, n-last.count, last, regions, now) {
			continue
		}
		counts = append(counts, global.Count{Cell: k, Count: n, ExpiresAt: expiresAt(k)})
	}
	if len(counts) == 0 {
		return
	}
	if err := g.cfg.Store.Publish(ctx, l.cfg.Region, counts, now); err != nil {
		st.fail(err)
		return
	}
	for _, c := range counts {
		g.published[c.Cell] = stored{count: c.Count, at: now}
	}
	st.Published = len(counts)
}

// publishable reports whether cell k, whose region holds back held units
// above the count stored (last), is to be published now (see publish), or
// with drive.Options.PublishShare set, once the cell's count reaches that
// share of its limit and at every change after that.
//
// The region's pace is held over the time since its stored count last rose
// (since the window began, for a count never stored), over one global
// interval at least (a count that rose a moment ago tells nothing of a
// pace) and paceIntervals at most (a burst after a long calm is judged by
// the burst). What it expects to admit before the other regions count a
// row is that pace over publishLag intervals, so a region publishes once
// held × (1 + publishLag × interval / span) × R reaches the headroom: at
// 1/(2.5R) of it when its count last rose within an interval, at 1/(1.5R)
// when it last rose three intervals ago or more.
//
// The headroom is the limit less the count stored, the other regions' and,
// while k is the current cell, the weighted count of the cell before it,
// counted up to the limit. The previous cell is looked up only when its
// weight can change the answer: a cell that publishes with no weight
// publishes with any, and one held back under the most the previous cell
// can weigh (the whole limit) is held back under any.
func (l *Limiter) publishable(k origin.Cell, c *cell, held int64, last stored, regions, now int64) bool {
	limit := c.limit.Load()
	if share := l.drive.PublishShare; share > 0 {
		return last.count > 0 || float64(held) >= share*float64(limit)
	}
	expected := float64(held) * l.paceFactor(k, last, now) * float64(regions)
	reaches := func(headroom int64) bool {
		return headroom <= 0 || expected >= float64(headroom)
	}
	headroom := limit - window.Add(last.count, c.importedCount())
	if reaches(headroom) {
		return true
	}
	pos := window.At(now, k.Duration.Milliseconds())
	if pos.Seq != k.Sequence || !reaches(headroom-pos.Weighted(limit)) {
		return false
	}
	prev := l.cells.loadPrevious(l.cells.keyHash(&k.Key), &k)
	return prev != nil && reaches(headroom-pos.Weighted(min(prev.count(), limit)))
}

// paceFactor is 1 + publishLag × interval / span, span being the time
// since the stored count of k last rose (last.at, or the start of k's
// window if it was never stored), one interval at least and paceIntervals
// at most: the factor, between 1.5 and 2.5, by which a region's pace would
// multiply what it holds back by the time the other regions count its row
// (see publishable).
func (l *Limiter) paceFactor(k origin.Cell, last stored, now int64) float64 {
	interval := max(l.global.cfg.Interval.Milliseconds(), 1)
	since := last.at
	if last.count == 0 {
		since = k.Sequence * k.Duration.Milliseconds()
	}
	span := min(max(now-since, interval), paceIntervals*interval)
	return 1 + publishLag*float64(interval)/float64(span)
}

// expiresAt is the end of the window after cell k's: past it, k weighs
// nothing in any decision.
func expiresAt(k origin.Cell) int64 {
	return (k.Sequence + 2) * k.Duration.Milliseconds()
}

// pull imports the other regions' counts of every cell changed since the
// last pull, and raises this region's count to its published floor. The
// floor is also what the region has published of the cell, whichever of
// its nodes wrote it: publish writes only counts above it, so the nodes of
// a region that see the same regional count write it once between them,
// not once each (a row at or below the stored count changes nothing:
// entries of a G-Counter only grow).
//
// With both set, the denial rows are read in the same call and returned,
// for the caller to apply after it has published, as it applies those
// readDenials reads.
func (l *Limiter) pull(ctx context.Context, both global.PullerWithDenials, now int64, st *GlobalStats) []global.Denial {
	g := &l.global
	activeFor := regionsActiveFor * l.global.cfg.Interval.Milliseconds()
	var p global.Pull
	var denials []global.Denial
	denialCursor := g.denialCursor
	var err error
	if both != nil {
		p, denials, denialCursor, err = both.PullWithDenials(ctx, l.cfg.Region, g.cursor, g.denialCursor, now, activeFor)
	} else {
		p, err = l.global.cfg.Store.Pull(ctx, l.cfg.Region, g.cursor, now, activeFor)
	}
	if err != nil {
		st.fail(err)
		return nil
	}
	g.cursor, g.denialCursor, g.regions = p.Next, denialCursor, max(p.Regions, 1)
	for _, imp := range p.Cells {
		c := l.globalCell(imp.Cell)
		c.raiseImported(imp.Others)
		c.floor(imp.Own)
		if imp.Own > g.published[imp.Cell].count {
			g.published[imp.Cell] = stored{count: imp.Own, at: now}
		}
	}
	st.Pulled = len(p.Cells)
	return denials
}

// globalCell returns cell k, created if needed for what the global layer
// brings: cold (a regional origin hydrates it on its first decision), or in
// sync when the limiter is its own origin.
func (l *Limiter) globalCell(k origin.Cell) *cell {
	var synced int64 // cold
	if l.origin == nil {
		synced = 1
	}
	return l.cells.loadOrCreate(l.cells.keyHash(&k.Key), &k, synced)
}

// emitDenial queues the first qualifying denial of cur for propagation:
// windows of at least DenialMinWindow, and a current cell that holds at
// least DenialMinUsage × limit on its own. The usage that counts is the
// cell's, not the sliding window's: early in a window a denial comes from
// the previous cell's weight, which the receivers hold already, and a row
// for a nearly empty cell would make every region deny for the rest of the
// window, then again in the next one. A cell is emitted at most once per
// node, and never when it was received from another region. It never
// blocks.
func (l *Limiter) emitDenial(q *resolved, cur *cell) {
	if l.denials == nil || q.pos.D < l.global.cfg.DenialMinWindow.Milliseconds() ||
		float64(cur.count()) < l.global.cfg.DenialMinUsage*float64(q.limit) || !cur.setFlag(flagDenialSeen) {
		return
	}
	d := global.Denial{Cell: q.current(), Limit: q.limit, Usage: cur.count(), Region: l.cfg.Region, ExpiresAt: expiresAt(q.current())}
	select {
	case l.denials <- d:
		l.denialsSince.CompareAndSwap(0, max(q.t, 1))
		if len(l.denials) >= l.global.cfg.DenialBatch {
			select {
			case l.denialsFull <- struct{}{}:
			default:
			}
		}
	default:
		l.denialsDropped.Add(1)
	}
}

// flushDenialsNow writes the queued denials, for the loop's flush timer.
func (l *Limiter) flushDenialsNow(ctx context.Context) {
	l.globalMu.Lock()
	defer l.globalMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.global.cfg.Timeout)
	defer cancel()
	var st GlobalStats
	l.flushDenials(ctx, l.cfg.Clock().UnixMilli(), nil, &st)
	if st.DenialsSent > 0 || st.DenialsLost > 0 || st.Err != nil {
		l.cfg.Observer.GlobalRound(st)
	}
}

// flushDenials drains the queue and writes it in batches of DenialBatch,
// leaving out the cells of stored, the denial rows the round has just read:
// the store keeps the first row of a cell, so a row of this node's after
// another region's would change nothing and only cost a write. (Regions
// often deny a counter within one round of each other; scale-1m sends 40%
// fewer denial rows for it, docs/capacity.md.) A batch the store refuses is
// dropped, not retried: a denial is worth something only while its window
// lasts, and the originating region enforces it anyway.
func (l *Limiter) flushDenials(ctx context.Context, now int64, stored []global.Denial, st *GlobalStats) {
	if l.denials == nil {
		return
	}
	g := &l.global
	l.denialsSince.Store(0) // before the drain: a denial queued after it sets it again
	for drained := false; !drained; {
		select {
		case d := <-l.denials:
			if d.ExpiresAt > now {
				g.pendingDenials = append(g.pendingDenials, d)
			}
		default:
			drained = true
		}
	}
	if len(stored) > 0 && len(g.pendingDenials) > 0 {
		held := make(map[origin.Cell]struct{}, len(stored))
		for _, d := range stored {
			held[d.Cell] = struct{}{}
		}
		n := len(g.pendingDenials)
		g.pendingDenials = slices.DeleteFunc(g.pendingDenials, func(d global.Denial) bool {
			_, ok := held[d.Cell]
			return ok
		})
		st.DenialsLeft += n - len(g.pendingDenials)
	}
	st.DenialsLost += int(l.denialsDropped.Swap(0))
	for len(g.pendingDenials) > 0 {
		batch := g.pendingDenials[:min(len(g.pendingDenials), l.global.cfg.DenialBatch)]
		g.pendingDenials = g.pendingDenials[len(batch):]
		if err := l.global.cfg.Store.EmitDenials(ctx, batch); err != nil {
			st.DenialsLost += len(batch)
			st.fail(err)
			continue
		}
		st.DenialsSent += len(batch)
	}
	g.pendingDenials = nil
}

// readDenials reads the denial rows other regions wrote since the last
// read, for a store that does not read them with the pull.
func (l *Limiter) readDenials(ctx context.Context, now int64, st *GlobalStats) []global.Denial {
	g := &l.global
	ds, next, err := l.global.cfg.Store.Denials(ctx, l.cfg.Region, g.denialCursor, now)
	if err != nil {
		st.fail(err)
		return nil
	}
	g.denialCursor = next
	return ds
}

// applyDenials applies the denial rows other regions wrote, read by a round,
// to their exact cells: the cell's imported count rises until its usage
// reaches the row's (the originator's usage, or its limit for a row without
// one), so the cell denies what the originator denied, and after the
// rollover weighs as the previous cell.
// Received cells are marked as emitted, so they are never sent back.
//
// What the row's usage holds of this region's count is not imported: the
// cell's committed count, or what this region has stored in the global
// layer if that is more (an evicted cell created again by the row holds
// nothing yet). Rows of this region are never applied, even from a store
// that returns them: the usage they carry is this region's own count, which every node
// of the region already holds as regional (through the origin, and the
// pulled Own floor); imported too, it would count twice and the node would
// deny the rest of the window.
func (l *Limiter) applyDenials(ds []global.Denial, st *GlobalStats) {
	for _, d := range ds {
		if d.Region == l.cfg.Region {
			continue
		}
		c := l.globalCell(d.Cell)
		c.setFlag(flagDenialSeen)
		usage := d.Usage
		if usage <= 0 {
			usage = d.Limit
		}
		// The usage holds this region's count as far as the originator
		// read it from the global store: at most what this region has
		// stored there, which a cell evicted and created again here
		// (committed 0) no longer holds, and its hydration brings back.
		c.raiseImported(usage - max(c.committed(), l.global.published[d.Cell].count))
		st.DenialsSynced++
	}
}
