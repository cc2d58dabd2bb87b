// Package memory is an in-process regional origin: one map of window cells
// that several limiters in the same process can share, standing in for Redis
// in simulations, examples and tests, and holding the cells a cluster node
// owns (origin/cluster).
//
// A single Sluice node does not need it: a limiter created without an origin
// is its own origin. Store is useful when several limiters must converge
// through one store without a network.
//
// # Bounded memory
//
// [WithMaxCells] caps the cells a Store holds, whatever is written to it;
// [WithMaxCellsPerTenant] caps those of one tenant (a workspace). A write
// that creates a cell past a cap first evicts one, by the limiter's fair
// rule: from the tenant holding the most cells (the writer's tenant counted
// with its new cell), so that a tenant within its fair share (90% of the cap
// divided by the tenants holding cells) never loses a cell to another
// tenant's writes; from the writer's own tenant when it is at its own cap.
// Unlike the limiter's table, a full Store evicts even when every tenant is
// within WithMaxCellsPerTenant: the largest tenant pays.
// Within the tenant, among the least recently used cells it holds, an
// expired cell goes first, then cells written once and not used since
// (identifiers seen once, the bulk of a scan), then cells in use, least
// recently used first, a cell whose window is over before a current one.
// A write, a decision, a read or a seed of a cell it holds uses it.
// Every call does a bounded amount of work: no call walks the store.
//
// Evicting a cell forgets its total and its writers' shares. Until its
// writers write it again, reads count it as zero: decisions on it
// under-count, and admit more than its total allows. A writer that writes
// it again adds its whole count to a total that forgot it, and each
// writer's count is added once, so the total comes back towards the sum of
// its writers' counts and never passes it: eviction loses counts, it never
// counts one twice. A cell whose window is over costs least to lose: reads
// weigh it less, or not at all.
package memory

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/fairmap"
	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
)

// sweepStep is the number of cells a write that creates a cell looks at
// for expired ones, carrying on where the previous write stopped: expired
// cells are removed a few at a time, at least as fast as cells are
// created, never in one pass over the store.
const sweepStep = 8

// Store is an [origin.Origin] kept in memory. A cell expires three windows
// after its last increment (the Redis origin's keys expire a fixed time after
// their creation instead; both outlive every decision that reads them), and
// is removed by the incremental sweep (or evicted first). With
// [WithMaxCells], a Store never holds more cells than the cap (see the
// package documentation for what evicting one costs). The zero value is not
// usable; create one with [New]. A Store is safe for concurrent use; every
// call holds its lock for a bounded amount of work.
type Store struct {
	clock func() time.Time

	mu     sync.Mutex
	cells  *fairmap.Map[origin.Cell, entry]
	region region
}

type entry struct {
	count     int64
	imported  int64                   // the other regions' count (origin.Region.Import)
	regions   map[string]int64        // each other region's entry, whose sum imported is at least
	shares    map[origin.Writer]int64 // each writer's share of count
	expiresAt int64                   // Unix ms
}

var (
	_ origin.Origin      = (*Store)(nil)
	_ origin.BatchLoader = (*Store)(nil)
)

// Option configures a [Store] in [New].
type Option func(*options)

type options struct{ maxCells, maxPerTenant int }

// WithMaxCells caps the cells the Store holds at n: a write that would
// create one more evicts one first (see the package documentation). n <= 0
// means no cap, the default.
func WithMaxCells(n int) Option { return func(o *options) { o.maxCells = n } }

// WithMaxCellsPerTenant caps the cells one tenant (the Workspace of their
// key) holds at n: a write that would create one more evicts one of the
// tenant's own first, whatever the others hold. n <= 0 means no cap but
// WithMaxCells, the default.
func WithMaxCellsPerTenant(n int) Option { return func(o *options) { o.maxPerTenant = n } }

// New returns an empty Store. clock supplies the time used for expiry; nil
// means time.Now.
func New(clock func() time.Time, opts ...Option) *Store {
	if clock == nil {
		clock = time.Now
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return &Store{clock: clock, cells: fairmap.New(fairmap.Config[origin.Cell, entry]{
		Max:          o.maxCells,
		MaxPerTenant: o.maxPerTenant,
		Tenant:       func(c origin.Cell) string { return c.Workspace },
		Age:          age,
	})}
}

// age is what evicting cell c costs at now: nothing once it expired; less
// once its window is over (reads weigh it less, or not at all) than while
// it is current.
func age(c origin.Cell, e *entry, now int64) fairmap.Age {
	switch d := c.Duration.Milliseconds(); {
	case e.expiresAt <= now:
		return fairmap.Dead
	case d > 0 && (c.Sequence+1)*d <= now:
		return fairmap.Over
	default:
		return fairmap.Current
	}
}

// Load returns the totals of cells seq and seq-1 of key.
func (s *Store) Load(ctx context.Context, key origin.Key, seq int64) (origin.Counts, error) {
	if err := ctx.Err(); err != nil {
		return origin.Counts{}, err
	}
	now := s.clock().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.countsLocked(key, seq, now), nil
}

// LoadMany returns the totals of each cell of cells and the one before it
// (see [origin.BatchLoader]), all read under one lock.
func (s *Store) LoadMany(ctx context.Context, cells []origin.Cell) ([]origin.Counts, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.clock().UnixMilli()
	out := make([]origin.Counts, len(cells))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range cells {
		out[i] = s.countsLocked(c.Key, c.Sequence, now)
	}
	return out, nil
}

// countsLocked returns the totals and imported counts of cells seq and
// seq-1 of key.
func (s *Store) countsLocked(key origin.Key, seq, now int64) origin.Counts {
	cur, curImp := s.readLocked(origin.Cell{Key: key, Sequence: seq}, now)
	prev, prevImp := s.readLocked(origin.Cell{Key: key, Sequence: seq - 1}, now)
	return origin.Counts{Current: cur, Previous: prev, Imported: origin.Imported{Current: curImp, Previous: prevImp}}
}

// Apply raises each delta's writer share to its Sent and returns the
// totals in order (see [origin.Origin]).
func (s *Store) Apply(ctx context.Context, deltas []origin.Delta) ([]origin.Total, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.clock().UnixMilli()
	totals := make([]origin.Total, len(deltas))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, d := range deltas {
		totals[i].Count, _ = s.raiseLocked(d.Cell, d.Writer, d.Sent, now)
		if e := s.cells.Peek(d.Cell); e != nil && e.expiresAt > now { // the write used it already
			totals[i].Imported = e.imported
		}
	}
	return totals, nil
}

// Decide makes the strict-mode decisions of c atomically (under the
// Store's lock), exactly as the limiter's sliding window does.
func (s *Store) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	if err := ctx.Err(); err != nil {
		return origin.Verdict{}, err
	}
	now := s.clock().UnixMilli()
	curCell := origin.Cell{Key: c.Key, Sequence: c.Seq}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Holder != 0 {
		return s.reserveLocked(c, now), nil
	}
	cur, share := s.raiseLocked(curCell, c.Writer, c.Sent, now)
	counts := s.countsLocked(c.Key, c.Seq, now)
	prev, imp := counts.Previous, c.Imported
	v := origin.Verdict{Admitted: make([]bool, len(c.Asks)), Stale: share > c.Sent}
	for i, a := range c.Asks {
		if v.Stale {
			break
		}
		before := c.Before(window.Add(cur, imp.Current), window.Add(prev, imp.Previous))
		if o := window.Decide(before, a.Limit, a.Cost); o.Success {
			share += a.Cost
			cur, _ = s.raiseLocked(curCell, c.Writer, share, now)
			v.Admitted[i] = true
		}
	}
	v.Counts = origin.Counts{Current: cur, Previous: prev, Imported: counts.Imported}
	v.Share = share
	return v, nil
}

// reserveLocked decides c, a reservation (c.Holder set): what c.Sent
// exceeds the writer's share by counts as spent, and the admitted costs go
// to the holder's share (see [origin.Check]).
func (s *Store) reserveLocked(c origin.Check, now int64) origin.Verdict {
	curCell := origin.Cell{Key: c.Key, Sequence: c.Seq}
	cur, share := s.countLocked(curCell, now), int64(0)
	var held int64
	if e := s.liveLocked(curCell, now, false); e != nil {
		share, held = e.shares[c.Writer], e.shares[c.Holder]
	}
	counts := s.countsLocked(c.Key, c.Seq, now)
	prev, imp := counts.Previous, c.Imported
	v := origin.Verdict{Admitted: make([]bool, len(c.Asks)), Stale: held != 0, Share: share}
	unsent := max(0, c.Sent-share)
	for i, a := range c.Asks {
		if v.Stale {
			break
		}
		before := c.Before(window.Add(cur, window.Add(unsent, imp.Current)), window.Add(prev, imp.Previous))
		if o := window.Decide(before, a.Limit, a.Cost); o.Success {
			held += a.Cost
			cur, _ = s.raiseLocked(curCell, c.Holder, held, now)
			v.Admitted[i] = true
		}
	}
	v.Counts = origin.Counts{Current: cur, Previous: prev, Imported: counts.Imported}
	return v
}

// Withdraw takes writer w's share out of cell c's total and marks w
// withdrawn there (see [origin.Origin]).
func (s *Store) Withdraw(ctx context.Context, c origin.Cell, w origin.Writer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.clock().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.liveLocked(c, now, true)
	if e == nil {
		return nil
	}
	if old := e.shares[w]; old != origin.Withdrawn {
		e.count = max(0, e.count-old)
		e.shares[w] = origin.Withdrawn
	}
	return nil
}

// Seed raises cell c's total to at least total, its imported count to at
// least imported, and each writer's share in shares to at least its value,
// without adding the share's rise to the total: the total already holds
// it. A cluster's new owner of a cell takes the cell from the other
// members' views this way.
func (s *Store) Seed(c origin.Cell, total, imported int64, shares map[origin.Writer]int64) {
	now := s.clock().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.liveLocked(c, now, total > 0 || imported > 0 || len(shares) > 0)
	if e == nil {
		return
	}
	e.count = max(e.count, total)
	e.imported = max(e.imported, imported)
	for w, n := range shares {
		e.shares[w] = max(e.shares[w], n)
	}
}

// Len returns the number of cells held, expired or not: at most the cap
// of [WithMaxCells], when set.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cells.Len()
}

// raiseLocked raises writer w's share of cell c to sent, and the total by
// as much, (re)starting the cell's expiry of three windows when it grows,
// and returns the total and w's share after it. A write of 0 to a cell that
// does not exist creates nothing.
func (s *Store) raiseLocked(c origin.Cell, w origin.Writer, sent, now int64) (total, share int64) {
	e := s.liveLocked(c, now, sent > 0)
	if e == nil {
		return 0, 0
	}
	if old := e.shares[w]; sent > old {
		e.count = window.Add(e.count, sent-old)
		e.shares[w] = sent
		e.expiresAt = now + 3*c.Duration.Milliseconds()
	}
	return e.count, e.shares[w]
}

// liveLocked returns the unexpired entry of c, marked used, creating it if
// create is set (nil otherwise). An expired entry is removed; creating one
// sweeps a few cells and, past a cap, evicts one (see the package
// documentation).
func (s *Store) liveLocked(c origin.Cell, now int64, create bool) *entry {
	e := s.cells.Use(c)
	if e != nil && e.expiresAt > now {
		return e
	}
	if e != nil {
		s.cells.Delete(c)
	}
	if !create {
		return nil
	}
	s.cells.Sweep(now, sweepStep)
	return s.cells.Insert(c, entry{shares: map[origin.Writer]int64{}, expiresAt: now + 3*c.Duration.Milliseconds()}, now)
}

// countLocked returns the total of c, 0 if it is absent or expired, and
// marks it used.
func (s *Store) countLocked(c origin.Cell, now int64) int64 {
	n, _ := s.readLocked(c, now)
	return n
}

// readLocked returns the total and the imported count of c, 0 if it is
// absent or expired, and marks it used.
func (s *Store) readLocked(c origin.Cell, now int64) (total, imported int64) {
	if e := s.liveLocked(c, now, false); e != nil {
		return e.count, e.imported
	}
	return 0, 0
}
