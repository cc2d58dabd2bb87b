package sluice

import (
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/hashtrie"
	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
)

// cell is the local state of one fixed window cell of one counter. Every field
// is read and written with atomics. A cell is created once and never copied.
//
// regional and speculative change together under the cell's lock (flagLocked)
// whenever speculative is involved: a batch's speculative increment, its
// commit or rollback, and a merge of origin totals. A single request's
// increment only CASes regional and takes no lock.
type cell struct {
	// regional is this region's count, including speculative increments.
	regional atomic.Int64
	// speculative is the part of regional added by RatelimitMany batches that
	// may still roll back. It must never be replayed or published.
	speculative atomic.Int64
	// imported is the count of the other regions, set by the global layer.
	imported atomic.Int64
	// admitted is this cell's count as a writer at the origin
	// (origin.Delta): every increment this limiter committed on the cell,
	// locally or through an origin decision. It only grows; a write sends
	// it whole.
	admitted atomic.Int64
	// acked is the highest admitted the origin has confirmed holding. While
	// it is below admitted, the cell is replayed.
	acked atomic.Int64
	// writer is this cell's writer at the origin, drawn at random when the
	// cell is created: a cell created again after an eviction is a new
	// writer, so its count starts from zero without undoing the old one's.
	writer origin.Writer
	// strictUntil is the Unix ms until which a denial in this cell keeps its
	// counter in strict mode.
	strictUntil atomic.Int64
	// syncedAt is the Unix ms of the last origin read or replay of this cell;
	// 0 while the cell is cold (never read from the origin).
	syncedAt atomic.Int64
	// backoffUntil is the Unix ms until which strict-mode requests of this
	// cell are decided locally, after an origin decision failed.
	backoffUntil atomic.Int64
	// limit is the limit of the latest request on the cell, kept only with
	// a global layer: its publication rule depends on it.
	limit atomic.Int64
	// flags holds the flag bits below and, in its top byte, the number of
	// consecutive replays this cell failed on its own (the origin refused
	// the cell, not the call).
	flags atomic.Uint32
	// deciding is the cost of the requests the origin decision on this
	// cell in flight (at most one at a time) asks for, saturated at
	// math.MaxInt32, which stands for any larger cost. A batch decided
	// locally counts it as spent, since the origin may admit it (see
	// reserve).
	deciding atomic.Int32
	// next links the cell in the replay queue while it is dirty.
	next *cell
}

const (
	flagDirty      uint32 = 1 << iota // queued for replay
	flagRefreshing                    // a freshness refresh is in flight
	flagLocked                        // regional and speculative are changing together
	flagDenialSeen                    // a denial of this cell was sent to, or received from, the global layer
	flagTouched                       // used since the last eviction pass looked at it (CLOCK)
	flagFresh                         // created and not used since: its first use does not count
	flagDeciding                      // an origin decision with this cell's count is in flight
	flagWriting                       // a replay of this cell is in flight
	flagInDoubt                       // a write of this cell failed: the origin may or may not hold it
	flagRecent                        // used since the last sweep
	flagReused                        // used again after the use that created it (never cleared)
	flagParked                        // on a parked list: replayed at its turn (see replayer)
	flagChanged                       // on the list of changed cells of the publication rule
	flagEvicted                       // deleted from the table
	flagReadLater                     // queued for a read with the next replay round (see readLater)
	flagUnsure     = flagDeciding | flagWriting | flagInDoubt
)

// The failure count lives in the flags' top byte.
const (
	failureShift        = 24
	failureUnit  uint32 = 1 << failureShift
	failureMask  uint32 = 0xff << failureShift
)

// failures returns the consecutive replays the cell failed on its own.
func (c *cell) failures() uint32 { return c.flags.Load() >> failureShift }

// failedAlone counts one more replay the cell failed on its own, up to
// the byte's capacity.
func (c *cell) failedAlone() {
	if c.failures() < 0xff {
		c.flags.Add(failureUnit)
	}
}

// resetFailures clears the failure count.
func (c *cell) resetFailures() { c.flags.And(^failureMask) }

// setFlag sets f and reports whether this call set it.
func (c *cell) setFlag(f uint32) bool {
	return c.flags.Or(f)&f == 0
}

func (c *cell) clearFlag(f uint32) {
	c.flags.And(^f)
}

// busy reports whether evicting the cell at now would lose more than a
// cached count: it is in strict mode, or holds increments the origin has
// not confirmed yet, or a batch's speculative increment.
func (c *cell) busy(now int64) bool {
	return c.strictUntil.Load() > now || c.speculative.Load() != 0 || c.unconfirmed() != 0 ||
		c.flags.Load()&(flagDirty|flagParked|flagUnsure) != 0
}

// unconfirmed returns the increments the origin has not confirmed yet.
func (c *cell) unconfirmed() int64 {
	return max(0, c.admitted.Load()-c.acked.Load())
}

// takeBack withdraws a committed increment of cost, from the count and
// from the writer's count together, under the cell's lock: a decision that
// raced Close answers ErrClosed instead of admitting.
func (c *cell) takeBack(cost int64) {
	c.lock()
	defer c.unlock()
	c.regional.Add(-cost)
	c.admitted.Add(-cost)
}

// confirm records that the origin holds at least n of this writer.
func (c *cell) confirm(n int64) { raise(&c.acked, n) }

// heldAtOrigin raises the writer's count and what the origin confirmed of
// it to n together, under the cell's lock: the origin holds n of this
// writer, more than it knew of (a stale decision, see decideOnce).
func (c *cell) heldAtOrigin(n int64) {
	c.lock()
	defer c.unlock()
	raise(&c.admitted, n)
	raise(&c.acked, n)
}

// settled clears the doubt over earlier writes once the origin confirmed
// a count of n: every earlier write carried less, so the origin holds n
// whether or not they landed. If the cell admitted more since, the doubt
// stays until a write carries that too (the local view lags meanwhile).
func (c *cell) settled(n int64) {
	if n >= c.admitted.Load() {
		c.clearFlag(flagInDoubt)
	}
}

// raise raises v to n if that is higher.
func raise(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

// lock takes the cell's lock, a bit of flags: it is held for a few atomic
// operations, never across a call, so waiters spin.
func (c *cell) lock() {
	for {
		old := c.flags.Load()
		if old&flagLocked == 0 && c.flags.CompareAndSwap(old, old|flagLocked) {
			return
		}
		runtime.Gosched()
	}
}

func (c *cell) unlock() { c.clearFlag(flagLocked) }

// reserve records the cost that cost returns as in flight to the origin
// (cost runs under the lock) and returns the
// speculative increments the decision must count as spent and the cell's
// count as a writer to send, all under the cell's lock. A batch's
// speculative increment and a local decision beside the origin's (see
// applyBeside) take the lock too, so either they see the reservation or
// the decision sees their increment: never neither, which could admit both
// past the limit.
func (c *cell) reserve(cost func() int64) (speculative, sent int64) {
	c.lock()
	defer c.unlock()
	c.deciding.Store(int32(min(cost(), math.MaxInt32)))
	return c.speculative.Load(), c.admitted.Load()
}

// release ends the reservation of the decision in flight, once its
// verdict is merged into the count, and runs also under the cell's lock.
func (c *cell) release(also func()) {
	c.lock()
	defer c.unlock()
	c.deciding.Store(0)
	also()
}

// inFlight returns the cost the decision in flight reserved.
func (c *cell) inFlight() int64 {
	if v := c.deciding.Load(); v != math.MaxInt32 {
		return int64(v)
	}
	return math.MaxInt64
}

// unsent returns the increments of this writer the origin has not
// confirmed (0 for nil).
func (c *cell) unsent() int64 {
	if c == nil {
		return 0
	}
	return c.unconfirmed()
}

// countsAside returns the cell's count as a writer and its speculative
// increments, read together under the lock: what a reservation at the
// origin counts as spent beside the origin's total (see
// Limiter.reservations).
func (c *cell) countsAside() (sent, speculative int64) {
	c.lock()
	defer c.unlock()
	return c.admitted.Load(), c.speculative.Load()
}

// importedCount returns the other regions' count of the cell (0 for nil).
func (c *cell) importedCount() int64 {
	if c == nil {
		return 0
	}
	return c.imported.Load()
}

// committed returns the region's count without speculative increments:
// what the global layer may publish.
func (c *cell) committed() int64 {
	c.lock()
	defer c.unlock()
	return c.regional.Load() - c.speculative.Load()
}

// raiseImported raises the other regions' count to n if that is higher.
func (c *cell) raiseImported(n int64) { raise(&c.imported, n) }

// floor raises the committed count to n, a count of this region that the
// global layer holds (published by this or another node of the region).
func (c *cell) floor(n int64) {
	c.lock()
	defer c.unlock()
	for {
		local := c.regional.Load()
		want := window.Add(n, c.speculative.Load())
		if want <= local || c.regional.CompareAndSwap(local, want) {
			return
		}
	}
}

// count returns the cell's usage: regional plus imported, saturated at
// math.MaxInt64 (imported counts come from other regions and may be huge).
func (c *cell) count() int64 {
	if c == nil {
		return 0
	}
	return window.Add(c.regional.Load(), c.imported.Load())
}

// strict returns the strict-mode deadline left by a denial in this cell.
// Strict mode belongs to the counter, not to one cell: a deadline t+d set in
// cell seq can reach into cell seq+1 but never further, so the deadlines of
// the current and previous cells together are exactly the counter's.
func (c *cell) strict() int64 {
	if c == nil {
		return 0
	}
	return c.strictUntil.Load()
}

// merge raises the regional count to an origin total that is known to hold
// included of this cell's count as a writer, keeping the local increments
// the total does not hold (admitted beyond included, and speculative).
// Counts only grow: a lower total changes nothing. It holds the cell's
// lock, so it never sees a speculative increment in one of regional and
// speculative but not yet in the other.
//
// The total is taken to hold what the origin confirmed (acked) too, when
// that is more than included: a write confirmed while this total was on
// its way (an origin decision made while a replay of the cell was in
// flight) may be in it or not, and counting it as held lets the local view
// lag until the next write or read, where counting it as unseen would count
// it twice.
func (c *cell) merge(total, included int64) {
	c.lock()
	defer c.unlock()
	c.mergeLocked(total, included)
}

// mergeLocked is merge with the cell's lock held.
func (c *cell) mergeLocked(total, included int64) {
	unseen := max(0, c.admitted.Load()-max(included, c.acked.Load()))
	for {
		local := c.regional.Load()
		want := window.Add(total, unseen+c.speculative.Load())
		if want <= local || c.regional.CompareAndSwap(local, want) {
			return
		}
	}
}

// mergeRead merges a total read from the origin (a load or a broadcast),
// which holds what the origin confirmed of this writer; while a write of
// the cell is in flight or in doubt, it may hold more, so nothing is
// added to it then: the local view lags rather than count a write twice.
//
// The flags are read before acked: a write that the total holds either
// still shows in the flags or was confirmed before its flag cleared, so
// acked holds it. Read the other way round, a write confirmed between the
// two loads would be counted twice.
func (c *cell) mergeRead(total int64) {
	if c.flags.Load()&flagUnsure != 0 {
		c.merge(total, c.admitted.Load())
		return
	}
	c.merge(total, c.acked.Load())
}

// mergeWrite merges the total that a write of sent units of this writer
// returned (a replay). The origin raised the writer's count to sent, or
// kept it where it was if that was more: a decision of the cell that
// reached the origin first (while the write was on its way) left it at
// that decision's count and the units it admitted. While such a decision
// is in flight, nothing the cell admitted is counted as missing from the
// total, the way mergeRead does; once it is answered, what it confirmed
// is (see merge).
func (c *cell) mergeWrite(total, sent int64) {
	if c.flags.Load()&flagDeciding != 0 {
		c.merge(total, c.admitted.Load())
		return
	}
	c.merge(total, sent)
}

// raiseStrict moves the strict-mode deadline to until if that is later.
func (c *cell) raiseStrict(until int64) {
	for {
		old := c.strictUntil.Load()
		if until <= old || c.strictUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

// touch marks the cell as used, for the eviction pass (flagTouched and
// flagReused) and the sweep (flagRecent). For eviction, the use that
// follows its creation does not count, so identities seen once go before
// those in use. It writes only when a mark is not set, so a hot cell costs
// one load.
func (c *cell) touch() {
	const used = flagTouched | flagRecent | flagReused
	if f := c.flags.Load(); f&used != used {
		if f&flagFresh != 0 {
			c.flags.And(^flagFresh)
			c.flags.Or(flagRecent)
			return
		}
		c.flags.Or(used)
	}
}

// cellTable is the flat concurrent map of all live cells, keyed by
// (workspace, namespace, identifier, duration, sequence).
type cellTable struct {
	seed maphash.Seed
	m    *hashtrie.Map[origin.Cell, cell]
	// live counts the cells in m; when it passes max, full is signalled
	// (without blocking) so that the janitor evicts at once.
	live atomic.Int64
	max  int64
	full chan struct{}
}

// newCellTable returns an empty table that asks for eviction past max cells.
func newCellTable(max int64) *cellTable {
	t := &cellTable{seed: maphash.MakeSeed(), max: max, full: make(chan struct{}, 1)}
	t.m = hashtrie.New[origin.Cell, cell](func(c origin.Cell) uint64 {
		return cellHash(t.keyHash(&c.Key), c.Sequence)
	})
	return t
}

// keyHash hashes a counter identity. Each string is hashed on its own and
// the three hashes are combined at different rotations, so moving bytes
// from one field to another, or swapping two fields, changes the hash; the
// duration is spread over the word first. The seed is random per table:
// identifiers come from clients and must not be able to pick colliding
// hashes. The four parts are independent, so the processor computes them
// side by side.
func (t *cellTable) keyHash(k *origin.Key) uint64 {
	return maphash.String(t.seed, k.Identifier) ^
		bits.RotateLeft64(maphash.String(t.seed, k.Namespace), 21) ^
		bits.RotateLeft64(maphash.String(t.seed, k.Workspace), 42) ^
		mix(uint64(k.Duration))
}

// cellHash derives the hash of one cell from its identity's hash, so a
// request hashes its strings once for both of the cells it reads. The
// golden-ratio step moves consecutive cells of one identity far apart in
// the high bits, which the map reads first.
func cellHash(keyHash uint64, seq int64) uint64 {
	return keyHash + uint64(seq)*0x9e3779b97f4a7c15
}

// mix is the splitmix64 finaliser: a bijection that spreads every input bit
// over the whole word.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (t *cellTable) load(h uint64, c *origin.Cell) *cell {
	return t.m.Load(cellHash(h, c.Sequence), c)
}

// loadPrevious returns the cell before *c, or nil if it is absent. It
// looks it up by moving c back one cell and restoring it, instead of
// copying the key: c must not be shared while it runs.
func (t *cellTable) loadPrevious(h uint64, c *origin.Cell) *cell {
	c.Sequence--
	v := t.m.Load(cellHash(h, c.Sequence), c)
	c.Sequence++
	return v
}

// loadOrCreate returns the cell, creating it if needed; synced is the
// syncedAt of a new cell (non-zero when the limiter is its own origin, or
// the cell's counts come from an origin read).
func (t *cellTable) loadOrCreate(h uint64, c *origin.Cell, synced int64) *cell {
	v, loaded := t.m.LoadOrStore(cellHash(h, c.Sequence), c, func(v *cell) {
		v.syncedAt.Store(synced)
		v.flags.Store(flagFresh)
		v.writer = origin.Writer(rand.Uint64())
	})
	if !loaded && t.live.Add(1) > t.max {
		select {
		case t.full <- struct{}{}:
		default:
		}
	}
	return v
}

// delete removes cell k if it is still c, and reports whether it did.
func (t *cellTable) delete(k origin.Cell, c *cell) bool {
	if !t.m.CompareAndDelete(cellHash(t.keyHash(&k.Key), k.Sequence), k, c) {
		return false
	}
	c.flags.Or(flagEvicted)
	t.live.Add(-1)
	return true
}
