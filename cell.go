package sluice

import (
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/hashtrie"
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
	// pending is the committed local increments not yet replayed to the origin.
	pending atomic.Int64
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
	// flags holds flagDirty, flagRefreshing and flagLocked.
	flags atomic.Uint32
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
)

// setFlag sets f and reports whether this call set it.
func (c *cell) setFlag(f uint32) bool {
	return c.flags.Or(f)&f == 0
}

func (c *cell) clearFlag(f uint32) {
	c.flags.And(^f)
}

// busy reports whether evicting the cell at now would lose more than a
// cached count: it is in strict mode, or holds increments not replayed yet,
// or a batch's speculative increment.
func (c *cell) busy(now int64) bool {
	return c.strictUntil.Load() > now || c.pending.Load() != 0 || c.speculative.Load() != 0 ||
		c.flags.Load()&flagDirty != 0
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
func (c *cell) raiseImported(n int64) {
	for {
		old := c.imported.Load()
		if n <= old || c.imported.CompareAndSwap(old, n) {
			return
		}
	}
}

// floor raises the committed count to n, a count of this region that the
// global layer holds (published by this or another node of the region).
func (c *cell) floor(n int64) {
	c.lock()
	defer c.unlock()
	for {
		local := c.regional.Load()
		want := n + c.speculative.Load()
		if want <= local || c.regional.CompareAndSwap(local, want) {
			return
		}
	}
}

// count returns the cell's usage: regional plus imported.
func (c *cell) count() int64 {
	if c == nil {
		return 0
	}
	return c.regional.Load() + c.imported.Load()
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

// merge raises the regional count to an origin total, keeping the local
// increments the origin has not seen yet (pending and speculative). Counts
// only grow: a lower total changes nothing. It holds the cell's lock, so it
// never sees a speculative increment in one of regional and speculative but
// not yet in the other.
func (c *cell) merge(total int64) {
	c.lock()
	defer c.unlock()
	for {
		local := c.regional.Load()
		want := total + c.pending.Load() + c.speculative.Load()
		if want <= local || c.regional.CompareAndSwap(local, want) {
			return
		}
	}
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

// touch marks the cell as used, for the eviction pass. The use that follows
// its creation does not count, so identities seen once go before those in
// use. It writes only when the mark is not set, so a hot cell costs one load.
func (c *cell) touch() {
	if f := c.flags.Load(); f&flagTouched == 0 {
		if f&flagFresh != 0 {
			c.flags.And(^flagFresh)
			return
		}
		c.flags.Or(flagTouched)
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

// loadOrCreate returns the cell, creating it if needed; synced is the
// syncedAt of a new cell (non-zero when the limiter is its own origin, or
// the cell's counts come from an origin read).
func (t *cellTable) loadOrCreate(h uint64, c *origin.Cell, synced int64) *cell {
	v, loaded := t.m.LoadOrStore(cellHash(h, c.Sequence), c, func(v *cell) {
		v.syncedAt.Store(synced)
		v.flags.Store(flagFresh)
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
	t.live.Add(-1)
	return true
}
