package sluice

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
)

// The global layer: regions converge through a global.Store, never on the
// request path, and one node of each region at a time talks to it. One
// goroutine of every node owns the loop: roundsPerInterval times an
// Interval (±20%) it takes or renews its region's lease, and hands the
// region's leader, through the regional origin, the cells whose
// count its publication rule publishes and the denials it has queued
// (globallead.go: the leader's side). Between rounds it hands the queued
// denials on when the next round would keep one waiting longer than
// DenialFlush (or as soon as DenialBatch wait).

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
// (docs/benchmarks/consistency.md), 1.5 writes the fewest rows that leave every
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

// roundsPerInterval is how many rounds every node runs per global
// interval: each takes or renews the lease and hands the leader its
// nominations, and the leader's writes and pulls the store. A count takes
// three steps to the other regions' nodes (a node's nomination, its
// leader's write, the other leaders' pulls); three rounds an interval keep
// them within what the publication rule expects (publishLag), as when
// every node wrote and pulled the store itself once an interval
// (sim.TestLateBurstOverThreeRegions: 4.9% over with three, 6.6% with
// two, 12.9% with one).
const roundsPerInterval = drive.RoundsPerInterval

// leaseIntervals is how long a region's lease lasts without a renewal, in
// global intervals. A live leader renews it at every round (0.4 interval
// apart at the most), and a node takes over a lapsed one at its next
// round: within 1.25 + 0.4 intervals of the leader's last renewal.
const leaseIntervals = 1.25

// minLease is the shortest lease, whatever the interval: a lease of a few
// milliseconds (intervals that short serve tests) would change hands at
// every pause of a process.
const minLease = 250 * time.Millisecond

// maxTake is the most nominations a leader takes from its region's queue
// in one call, and maxTakes the most calls of one round or flush: a round
// takes at most maxTake × maxTakes nominations, the rest waits (bounded
// by the origin's queue) for the next.
const (
	maxTake  = 8192
	maxTakes = 16
)

// globalState is owned by the global loop's goroutine (or by a caller of
// syncGlobal, which takes the same lock).
type globalState struct {
	// cfg is the global layer's configuration with its defaults, set by New
	// and never changed (zero without a global layer).
	cfg GlobalConfig
	// region is the seam through which the region's nodes share the
	// layer: the origin when it is an origin.Region, else this node alone
	// (localRegion).
	region origin.Region
	// holder names this node in its region's lease.
	holder string
	// lease is the lease as the last Lead returned it; leading reports
	// that this node held it then.
	lease   origin.Lease
	leading bool
	// renewedAt is when (Unix ms, the limiter's clock) this node last
	// took or renewed the lease.
	renewedAt int64
	// published is, per cell, the highest count of this region this node
	// nominated for publication (or, alone in its region, knows to be
	// stored) and when it last rose: what its publication rule compares
	// with.
	published map[origin.Cell]stored
	// prunesAt is the earliest end of a window after a cell of published
	// (see expiresAt): until then no entry of it has expired.
	prunesAt int64
	// regions is the number of regions present (≥ 1): at the leader's last
	// pull, as the leader's lease carries it for the other nodes.
	regions int
	// ruledAt and ruledRegions are the time and the regions (at least 2)
	// of the publication rule's last pass over the cells; taken is the
	// list of changed cells that pass took (see publishable).
	ruledAt, ruledRegions int64
	taken                 []*cell
	// The leader's state, kept while it leads (see globallead.go).
	lead leaderState
}

// importedCell is what a leader remembers of the entries it imported of
// one cell: each other region's highest count imported, and when a pull
// last read one of them. It takes about a third of the memory of an entry
// remembered apart per region (TestLeaderHeapBytes).
type importedCell struct {
	seen    int64 // Unix ms of the pull that last read one of its entries
	entries []importedEntry
	// known reports that the entries are every other region's entry the
	// regional origin stores of the cell and imported its imported count:
	// the leader read them there (origin.Stored) and only it has written
	// them since, so it may write them without reading (origin.Import.Known).
	known    bool
	imported int64
}

// importedEntry is one region's highest count imported of a cell.
type importedEntry struct {
	region string // the name the leader's regions hold, shared by its entries
	count  int64
}

// count returns region's count imported of the cell (0 if none; a nil c
// has none).
func (c *importedCell) count(region string) int64 {
	if c == nil {
		return 0
	}
	for _, e := range c.entries {
		if e.region == region {
			return e.count
		}
	}
	return 0
}

// raise raises region's entry to n, and reports whether it added the
// entry.
func (c *importedCell) raise(region string, n int64) bool {
	for i := range c.entries {
		if c.entries[i].region == region {
			c.entries[i].count = max(c.entries[i].count, n)
			return false
		}
	}
	c.entries = append(c.entries, importedEntry{region: region, count: n})
	return true
}

// sum returns the sum of the cell's entries, saturated (0 for a nil c).
func (c *importedCell) sum() int64 {
	if c == nil {
		return 0
	}
	var sum int64
	for _, e := range c.entries {
		sum = window.Add(sum, e.count)
	}
	return sum
}

// leaderState is what the region's leader keeps between its rounds.
type leaderState struct {
	// cursor and denialCursor are where the last pull and denial read
	// stopped; a new leader takes them from the lease.
	cursor, denialCursor global.Cursor
	// counts are the nominated counts taken and not written yet, the
	// highest of each cell's nominations; written the highest count of
	// each cell written to the store.
	counts  map[origin.Cell]int64
	written map[origin.Cell]int64
	// imported is the count of each other region's entry of each cell the
	// leader last imported, and when it last read it: a pull that reads an
	// entry again (a row within the store's overlap) imports it only if it
	// rose. A cell none of whose entries a pull read for importMemory is
	// forgotten (see forget): a pull reads a row again only within its overlap,
	// and the leader's memory must not grow with every entry of a window.
	imported map[origin.Cell]*importedCell
	// entries counts the entries of imported.
	entries int
	// regions holds the name of each region of the entries in imported
	// (and of those forgotten since the last forgetting pass), which the
	// entries share.
	regions map[string]string
	// received holds the cells of other regions' denial rows read, until
	// they expire: a denial of this region's for one of them is not
	// written (the store keeps the first row of a cell).
	received map[origin.Cell]struct{}
	// rounds counts rounds, for forgetting imported entries.
	rounds int
	// lastRound is the time (Unix ms) of the leader's last round, 0 before
	// its first: a round that crosses a cleanup boundary cleans up.
	lastRound int64
	// announceAt is the time (Unix ms) from which the leader announces its
	// region again even with nothing to publish.
	announceAt int64
	// pendingDenials holds the denials taken and not written yet.
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
	Nominated     int           // cells and denials this node handed its region's leader
	Published     int           // count rows written (by the leader)
	Pulled        int           // cells read back (by the leader)
	Regions       int           // regions present
	DenialsSent   int           // denial rows written (by the leader)
	DenialsSynced int           // other regions' denial rows imported (by the leader)
	DenialsLost   int           // denials dropped (queue full, or a write or hand-over failed)
	DenialsLeft   int           // denials not written: another region's row for the cell was read
	Cleaned       int           // expired rows deleted by this node
	Elapsed       time.Duration // wall time of the round
	Err           error         // the first failure of the round, if any
	// Leader reports that this node ran its region's round; LeaderSince is
	// when the region's current leader took the lease (Unix ms of the
	// origin's clock, 0 if none holds it).
	Leader      bool
	LeaderSince int64
	// LeaderHeapBytes estimates the memory the leader keeps between its
	// rounds of the cells it handles (its record of the other regions'
	// entries it imported, and of its region's counts it took and wrote),
	// 0 on a node that does not lead. A node that loses the lease drops it.
	LeaderHeapBytes int64
}

// runGlobal is the global loop: a round every Interval/roundsPerInterval
// (±20%). It stops when ctx is done, after a last hand-over of the queued
// denials (and, on the leader, a last write). Driven by ticks of its own
// (drive.Options.GlobalTicks), it runs rounds only on those ticks, and
// denials are handed on in rounds only, so that a simulation in virtual
// time stays deterministic.
//
// On its own timer it also checks the denial queue every DenialFlush: it
// hands it on
// then only if the next round would come too late, later than DenialFlush
// after the oldest denial waiting (a leader also takes the region's
// nominations and writes the denials among them). A full queue
// (DenialBatch) is handed on at once.
func (l *Limiter) runGlobal(ctx context.Context) {
	defer l.closeGlobal()
	rounds := l.drive.GlobalTicks
	var flush <-chan time.Time // nil: in rounds only
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
			start := time.Now()
			_ = l.syncGlobal(ctx)
			if timer != nil { // the next round is due a span after this one began, not after it ended
				timer.Reset(max(l.nextRound(&nextRound)-time.Since(start), 0))
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

// closeGlobal hands on the queued denials when the loop stops and, on the
// leader, writes what it took and has not written, within FlushTimeout.
func (l *Limiter) closeGlobal() {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.FlushTimeout)
	defer cancel()
	l.globalMu.Lock()
	defer l.globalMu.Unlock()
	now := l.cfg.Clock().UnixMilli()
	var st GlobalStats
	l.handOverDenials(ctx, now, &st)
	if l.global.leading {
		l.takeNominations(ctx, now, &st)
		l.writeCounts(ctx, now, &st)
		l.writeDenials(ctx, now, nil, &st)
	}
	st.Leader, st.LeaderSince = l.global.leading, l.global.lease.Since
	if st.DenialsLost > 0 || st.Published > 0 || st.DenialsSent > 0 || st.Err != nil {
		l.cfg.Observer.GlobalRound(st)
	}
}

// nextRound returns the wait until the next round, the global interval
// over roundsPerInterval ± 20%, and sets *at to when it ends.
func (l *Limiter) nextRound(at *int64) time.Duration {
	d := jitter(l.global.cfg.Interval / roundsPerInterval)
	*at = l.nowMilli() + d.Milliseconds()
	return d
}

// denialsDue reports whether the queued denials are to be handed on now
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

// syncGlobal runs one round of the global layer now: it takes or renews
// the region's lease, hands the leader the cells this node's publication
// rule publishes and its queued denials, and, if this node leads its
// region, runs the region's round (see leadRound). The background loop
// calls it every interval; tests and simulations call it through
// drive.Handle. It returns the first error of the round (the round goes on
// after an error); without a global layer it does nothing.
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
	l.lead(ctx, now, &st)
	l.nominate(ctx, now, &st)
	if l.global.leading {
		l.leadRound(ctx, now, &st)
		st.LeaderHeapBytes = l.global.lead.heapBytes()
	}
	st.Regions = l.global.regions
	st.Leader, st.LeaderSince = l.global.leading, l.global.lease.Since
	st.Elapsed = time.Since(start)
	l.cfg.Observer.GlobalRound(st)
	if st.Err != nil && !errors.Is(st.Err, context.Canceled) {
		l.cfg.Logger.Debug("sluice: global round failed; regions converge later", "err", st.Err)
	}
	return st.Err
}

func (st *GlobalStats) fail(err error) {
	if err != nil && st.Err == nil {
		st.Err = err
	}
}

// nominate hands the region's leader, in one call, this node's count of
// every active cell that changed since it last nominated it and passes the
// publication rule (see publish), and the denials it has queued. A cell
// whose hand-over failed is nominated again at the next round; its denials
// are lost (and counted).
func (l *Limiter) nominate(ctx context.Context, now int64, st *GlobalStats) {
	g := &l.global
	var ns []origin.Nomination
	var cells []*cell
	if !g.cfg.DisableCounters {
		ns, cells = l.publishable(now)
	}
	counts := len(ns)
	ns = l.drainDenials(ns, now, st)
	if len(ns) == 0 {
		return
	}
	if err := g.region.Nominate(ctx, ns); err != nil {
		st.DenialsLost += len(ns) - counts
		st.fail(err)
		for _, c := range cells {
			l.changed(c) // looked at again at the next round
		}
		return
	}
	for _, n := range ns[:counts] {
		g.setPublished(n.Cell, stored{count: n.Count, at: now})
	}
	st.Nominated += len(ns)
}

// setPublished records s as what this node knows of cell k's count in the
// store.
func (g *globalState) setPublished(k origin.Cell, s stored) {
	g.published[k] = s
	g.prunesAt = min(g.prunesAt, expiresAt(k))
}

// prunePublished forgets the cells of published expired at now (a cell the
// janitor evicted early is forgotten here too).
func (g *globalState) prunePublished(now int64) {
	if now < g.prunesAt {
		return
	}
	g.prunesAt = math.MaxInt64
	for k := range g.published {
		if expired(k, now) {
			delete(g.published, k)
		} else {
			g.prunesAt = min(g.prunesAt, expiresAt(k))
		}
	}
}

// publishable returns a nomination of this node's count of every active
// cell that changed since it last nominated it and passes the publication
// rule.
//
// The rule: a region publishes a cell's count once what it holds back (its
// count above what it has stored), together with what it expects to admit
// at its present pace before the other regions count a row, reaches 1/R of
// the cell's headroom, R being the number of regions present and the
// headroom the limit less what this region knows of the window's usage (its
// stored count, the other regions' and the previous cell's weight, up to
// the limit; R is 2 when this region sees no other, so that a region that
// appears within a window finds most of what was spent); see passes.
// Every region holds back less than 1/R of the headroom it sees by the
// time the others can see its row, so all of them together hold back less
// than all of it: what no other region can see never uses up the limit on
// its own. A counter that grows slowly holds back up to 1/(1.5R) of the
// headroom and writes few rows; one that grows fast publishes at as little
// as 1/(2.5R) of it, before its pace spends the rest unseen. A cell far
// from its limit writes a row only when its count has grown by a sizeable
// share of what is left, or none at all; as the usage nears the limit the
// share shrinks to every change. The leader writes a count no higher than
// one it has written already only once (see writeCounts).
//
// It looks only at the cells that can pass now and did not at the rule's
// last pass: those marked as changed since (l.changes), the cell after each
// of them that is the previous cell now (its weight counts in the rule of
// the current one), and those it kept for later. With everything else the
// same, time only makes a cell harder to publish: its pace is measured
// over a longer span and the previous cell weighs less, until the cell is
// no longer the current one and its weight stops counting. Two things make
// it easier: the start of the window of a cell from the future, which is
// kept for later until then, and a change of the number of regions, or a
// clock that went back, after which the pass looks at every cell. It
// returns the cells nominated too, to be looked at again if the hand-over
// fails.
func (l *Limiter) publishable(now int64) ([]origin.Nomination, []*cell) {
	g := &l.global
	regions := int64(max(g.regions, 2)) // alone, as if one more region were present
	g.prunePublished(now)
	g.taken = l.changes.take(g.taken)
	all := regions != g.ruledRegions || now < g.ruledAt
	g.ruledRegions, g.ruledAt = regions, now
	var ns []origin.Nomination
	var cells []*cell
	rule := func(k origin.Cell, c *cell) {
		if nm, ok := l.nominee(k, c, regions, now); ok {
			ns, cells = append(ns, nm), append(cells, c)
		} else if k.Sequence > window.At(now, k.Duration.Milliseconds()).Seq {
			l.changes.mark(c) // kept for later: its window has not begun
		}
	}
	if all {
		for _, c := range g.taken {
			c.clearFlag(flagChanged)
		}
		for k, c := range l.cells.m.All() {
			rule(k, c)
		}
		return ns, cells
	}
	g.taken = l.withNextCells(g.taken, now)
	for _, c := range g.taken {
		c.clearFlag(flagChanged) // before the rule reads it: a change after marks it again
		rule(l.cells.m.KeyOf(c), c)
	}
	return ns, cells
}

// withNextCells appends to cells, taken from l.changes and still flagged,
// the cell after each of them that is the previous cell at now, when it
// exists and is not flagged already: the rule of the current cell counts
// the previous one's weight. Each cell appended is flagged, as the taken
// ones are.
func (l *Limiter) withNextCells(cells []*cell, now int64) []*cell {
	taken := len(cells)
	for _, c := range cells[:taken] {
		k := l.cells.m.KeyOf(c)
		if window.At(now, k.Duration.Milliseconds()).Seq != k.Sequence+1 {
			continue
		}
		k.Sequence++
		if next := l.cells.load(l.cells.keyHash(&k.Key), &k); next != nil && next.setFlag(flagChanged) {
			cells = append(cells, next)
		}
	}
	return cells
}

// nominee returns the nomination of cell k, c, when the publication rule
// publishes it at now with regions regions present (see publishable).
func (l *Limiter) nominee(k origin.Cell, c *cell, regions, now int64) (origin.Nomination, bool) {
	if c.flags.Load()&flagEvicted != 0 || expired(k, now) {
		return origin.Nomination{}, false // the janitor evicts it, or did
	}
	n, last := c.committed(), l.global.published[k]
	if n <= last.count || !l.passes(k, c, n-last.count, last, regions, now) {
		return origin.Nomination{}, false
	}
	return origin.Nomination{Cell: k, Count: n, Limit: c.limit.Load()}, true
}

// passes reports whether cell k, whose region holds back held units
// above the count stored (last), is to be published now (see publishable), or
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
func (l *Limiter) passes(k origin.Cell, c *cell, held int64, last stored, regions, now int64) bool {
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

// flushDenialsNow hands the queued denials on, for the loop's flush timer;
// a leader also takes its region's nominations and writes the denials
// among them.
func (l *Limiter) flushDenialsNow(ctx context.Context) {
	l.globalMu.Lock()
	defer l.globalMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.global.cfg.Timeout)
	defer cancel()
	now := l.cfg.Clock().UnixMilli()
	var st GlobalStats
	l.handOverDenials(ctx, now, &st)
	if l.global.leading {
		l.takeNominations(ctx, now, &st)
		l.writeDenials(ctx, now, nil, &st)
	}
	st.Leader, st.LeaderSince = l.global.leading, l.global.lease.Since
	if st.DenialsSent > 0 || st.DenialsLost > 0 || st.Err != nil {
		l.cfg.Observer.GlobalRound(st)
	}
}

// handOverDenials hands the queued denials to the region's leader.
func (l *Limiter) handOverDenials(ctx context.Context, now int64, st *GlobalStats) {
	ns := l.drainDenials(nil, now, st)
	if len(ns) == 0 {
		return
	}
	if err := l.global.region.Nominate(ctx, ns); err != nil {
		st.DenialsLost += len(ns)
		st.fail(err)
		return
	}
	st.Nominated += len(ns)
}

// drainDenials drains the queue of denials into ns, as nominations, leaving
// out those that expired, and counts the denials the full queue dropped.
func (l *Limiter) drainDenials(ns []origin.Nomination, now int64, st *GlobalStats) []origin.Nomination {
	if l.denials == nil {
		return ns
	}
	l.denialsSince.Store(0) // before the drain: a denial queued after it sets it again
	for {
		select {
		case d := <-l.denials:
			if d.ExpiresAt > now {
				ns = append(ns, origin.Nomination{Cell: d.Cell, Limit: d.Limit, Usage: max(d.Usage, 1)})
			}
		default:
			st.DenialsLost += int(l.denialsDropped.Swap(0))
			return ns
		}
	}
}
