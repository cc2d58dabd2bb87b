package sim

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/global/mysql"
	"github.com/sluicehq/sluice/origin"
)

// vclock is the virtual clock every node, origin and fault of a run reads.
type vclock struct{ ms atomic.Int64 }

func (c *vclock) now() time.Time { return time.UnixMilli(c.ms.Load()) }
func (c *vclock) set(ms int64)   { c.ms.Store(ms) }
func (c *vclock) milli() int64   { return c.ms.Load() }

// outages is a schedule of intervals [from, until) of Unix ms.
type outages [][2]int64

func (o outages) at(ms int64) bool {
	for _, iv := range o {
		if ms >= iv[0] && ms < iv[1] {
			return true
		}
	}
	return false
}

// lossy fails a share of calls at random, from its own seeded source (the
// calls of a run come one at a time, in an order fixed by the seed, so the
// failures are too).
type lossy struct {
	mu    sync.Mutex
	share float64
	rng   *rand.Rand
}

func newLossy(share float64, seed, stream uint64) *lossy {
	return &lossy{share: share, rng: rand.New(rand.NewPCG(seed, stream))}
}

// lost reports whether this call is lost.
func (l *lossy) lost() bool {
	if l == nil || l.share == 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rng.Float64() < l.share
}

// originCounts counts the calls a region's nodes make to its origin; failed
// counts those refused by an outage or lost.
type originCounts struct {
	loads, applies, decides, failed atomic.Int64
	redis                           redisCosts // what the calls that got through would cost Redis
}

// faultyOrigin is a regional origin that counts its calls and fails every
// one of them with origin.ErrUnavailable during its outages.
type faultyOrigin struct {
	origin.Origin
	clock *vclock
	down  outages
	loss  *lossy
	n     *originCounts
	gate  *gate       // nil: replays land at once
	dead  atomic.Bool // the node is lost: every call fails
	// region is the wrapped origin's origin.Region (the memory origin's),
	// nil for the cluster origin's.
	region origin.Region
}

// faultyRegion is a faultyOrigin whose origin is an [origin.Region]: its
// calls fail in the same outages, and are counted as the Redis origin's
// commands.
type faultyRegion struct{ *faultyOrigin }

// asOrigin returns f as the limiter's origin: a faultyRegion when the
// origin it wraps is an origin.Region.
func (f *faultyOrigin) asOrigin() origin.Origin {
	if f.region != nil {
		return faultyRegion{f}
	}
	return f
}

// Lead implements [origin.Region].
func (f faultyRegion) Lead(ctx context.Context, r origin.LeaseRequest) (origin.Lease, error) {
	if f.fail() {
		return origin.Lease{}, origin.ErrUnavailable
	}
	l, err := f.region.Lead(ctx, r)
	if l.Held {
		f.n.redis.region(leadHeldCommands)
	} else {
		f.n.redis.region(leadCommands)
	}
	return l, err
}

// Nominate implements [origin.Region].
func (f faultyRegion) Nominate(ctx context.Context, ns []origin.Nomination) error {
	if f.fail() {
		return origin.ErrUnavailable
	}
	f.n.redis.region(nominateCommands)
	return f.region.Nominate(ctx, ns)
}

// Nominated implements [origin.Region].
func (f faultyRegion) Nominated(ctx context.Context, max int) ([]origin.Nomination, error) {
	if f.fail() {
		return nil, origin.ErrUnavailable
	}
	f.n.redis.region(nominatedCommands)
	return f.region.Nominated(ctx, max)
}

// Import implements [origin.Region].
func (f faultyRegion) Import(ctx context.Context, imports []origin.Import) error {
	if f.fail() {
		return origin.ErrUnavailable
	}
	n := importCommands(len(imports))
	for _, im := range imports {
		n += f.n.redis.expiry(im.Cell) // an import of a cell the region has not written creates its key
	}
	f.n.redis.region(n)
	return f.region.Import(ctx, imports)
}

// ImportStored implements [origin.StoredImporter], counted as the Redis
// origin on one server runs it (storedImportCommands); over a region that
// is not an origin.StoredImporter it imports as Import does and returns
// no Stored.
func (f faultyRegion) ImportStored(ctx context.Context, holder string, imports []origin.Import) ([]origin.Stored, error) {
	si, ok := f.region.(origin.StoredImporter)
	if !ok {
		return nil, f.Import(ctx, imports)
	}
	if f.fail() {
		return nil, origin.ErrUnavailable
	}
	var known int
	for _, im := range imports {
		if im.Known {
			known++
		}
	}
	n := storedImportCommands(len(imports)-known, known)
	for _, im := range imports {
		n += f.n.redis.expiry(im.Cell)
	}
	f.n.redis.region(n)
	return si.ImportStored(ctx, holder, imports)
}

// gate holds a node's replay calls until the simulator lets them land: a
// replay latency in virtual time.
type gate struct {
	on      atomic.Bool   // set while the simulator drives a replay round
	arrived chan struct{} // a replay call waits
	release chan struct{} // it may land
}

func newGate() *gate {
	return &gate{arrived: make(chan struct{}), release: make(chan struct{})}
}

// OnPush implements [origin.Pusher] when the origin it wraps does (the
// cluster origin's exceed broadcasts): pushes reach the limiter whatever
// the faults, as they do when the cluster origin is not wrapped.
func (f *faultyOrigin) OnPush(fn func(origin.Cell, int64)) {
	if p, ok := f.Origin.(origin.Pusher); ok {
		p.OnPush(fn)
	}
}

func (f *faultyOrigin) fail() bool {
	if f.dead.Load() || f.down.at(f.clock.milli()) || f.loss.lost() {
		f.n.failed.Add(1)
		return true
	}
	return false
}

// Load implements [origin.Origin].
func (f *faultyOrigin) Load(ctx context.Context, key origin.Key, seq int64) (origin.Counts, error) {
	f.n.loads.Add(1)
	if f.fail() {
		return origin.Counts{}, origin.ErrUnavailable
	}
	f.n.redis.load(key, seq)
	return f.Origin.Load(ctx, key, seq)
}

// Apply implements [origin.Origin]. Behind a gate, a replay round's call
// waits until the simulator lets it land.
func (f *faultyOrigin) Apply(ctx context.Context, deltas []origin.Delta) ([]origin.Total, error) {
	if f.gate != nil && f.gate.on.Load() {
		f.gate.arrived <- struct{}{}
		<-f.gate.release
	}
	f.n.applies.Add(1)
	if f.fail() {
		return nil, origin.ErrUnavailable
	}
	f.n.redis.apply(deltas)
	return f.Origin.Apply(ctx, deltas)
}

// Withdraw implements [origin.Origin].
func (f *faultyOrigin) Withdraw(ctx context.Context, c origin.Cell, w origin.Writer) error {
	if f.fail() {
		return origin.ErrUnavailable
	}
	return f.Origin.Withdraw(ctx, c, w)
}

// Decide implements [origin.Origin].
func (f *faultyOrigin) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	f.n.decides.Add(1)
	if f.fail() {
		return origin.Verdict{}, origin.ErrUnavailable
	}
	v, err := f.Origin.Decide(ctx, c)
	if err == nil {
		f.n.redis.decide(c, !v.Stale && (c.Sent > 0 || slices.Contains(v.Admitted, true)))
	}
	return v, err
}

// globalCounts counts the calls and rows of the global layer.
type globalCounts struct {
	calls, failed, published, denials, announced atomic.Int64
	// rows and statements are what the MySQL store would write and run:
	// the statements of each call (global/mysql: a pull or a read of
	// denials 1, an announce 1, a cleanup 6) and a publish's batch rows
	// and statements (mysql.PublishCost; a publish of no row sends
	// nothing), a row per cell's first denial, a statement per chunk of
	// denials sent.
	rows, statements atomic.Int64
	// rowsRead is what the MySQL store's reads would read (see readRows).
	rowsRead atomic.Int64
	// changes is what its pulls would read (see changeLog).
	changes changeLog
	// denied holds the cells with a denial row, until they expire.
	deniedMu sync.Mutex
	denied   map[origin.Cell]int64 // the row's ExpiresAt
}

// newDenialRows returns how many of denials insert a row, as the MySQL
// store's first-row-wins upserts do: those of a cell without one (the
// first of a call), which it records.
func (g *globalCounts) newDenialRows(denials []global.Denial) int {
	g.deniedMu.Lock()
	defer g.deniedMu.Unlock()
	if g.denied == nil {
		g.denied = map[origin.Cell]int64{}
	}
	n := 0
	for _, d := range denials {
		if _, ok := g.denied[d.Cell]; !ok {
			g.denied[d.Cell] = d.ExpiresAt
			n++
		}
	}
	return n
}

// forgetDenials forgets the cells whose denial rows expired by now and
// returns how many it forgot: the rows a cleanup at now deletes.
func (g *globalCounts) forgetDenials(now int64) int {
	g.deniedMu.Lock()
	defer g.deniedMu.Unlock()
	n := 0
	for c, exp := range g.denied {
		if exp <= now {
			delete(g.denied, c)
			n++
		}
	}
	return n
}

// cleanedUp counts the rows a cleanup reads that deletes batches batch
// rows and denials denial rows: each of its DELETEs (of batch rows, of
// denials, of the earlier releases' rows) reads the rows it deletes, by
// their expiry's index, and one more, its range's end. Its look for rows
// to merge, which reads the rows of windows longer than ten minutes once
// they are five minutes old, is not counted.
func (g *globalCounts) cleanedUp(batches, denials int) {
	g.rowsRead.Add(int64(batches + denials + 3))
}

// readRows counts the rows a read of the MySQL store reads, as MariaDB's
// Handler_read_* counts them (measured on MariaDB 10.11): each part of the
// read's one statement reads the rows of its index range and one more, its
// end. A pull's part reads the batch rows written since its starting
// point (rows, see changeLog: more than the last pull's, as the store's
// pulls read back over an overlap) and that of the regions the regions
// present (p.Regions); a read of denials' part reads the denial rows it
// returns (and the region's own, not counted here).
func (g *globalCounts) readRows(p *global.Pull, rows, denials int) {
	n := 0
	if p != nil {
		n += rows + 1 + max(p.Regions, 1) + 1
	}
	if denials >= 0 {
		n += denials + 1
	}
	g.rowsRead.Add(int64(n))
}

// wrote counts a call that upserts rows, one statement per chunk of
// mysqlChunkRows, after extra statements. An upsert reads the row it
// updates: a row read for each row written (an upper bound: a new row
// reads none).
func (g *globalCounts) wrote(rows, extra int) {
	g.rows.Add(int64(rows))
	g.rowsRead.Add(int64(rows))
	g.statements.Add(int64(extra + (rows+mysqlChunkRows-1)/mysqlChunkRows))
}

// mysqlChunkRows is the MySQL store's rows per INSERT of denials (its
// default ChunkRows).
const mysqlChunkRows = mysql.DefaultChunkRows

// faultyGlobal is a global store (over a global/memory store, which also
// reads pulls and denials at once) that counts calls and rows written,
// fails every call with global.ErrUnavailable during its outages, and may
// hold its writes back for a latency before they become visible.
type faultyGlobal struct {
	global.Store
	clock   *vclock
	down    outages
	loss    *lossy
	n       *globalCounts
	latency int64 // ms a write takes to become visible; 0: at once

	mu      sync.Mutex
	pending []heldWrite // in the order written, so due in order too
}

// heldWrite is a write the store has acknowledged and does not show yet.
type heldWrite struct {
	due   int64
	apply func(ctx context.Context, now int64) error
}

// call counts a call and reports whether it fails; first it makes visible
// the writes that are due.
func (f *faultyGlobal) call(ctx context.Context) bool {
	f.land(ctx)
	f.n.calls.Add(1)
	if f.down.at(f.clock.milli()) || f.loss.lost() {
		f.n.failed.Add(1)
		return true
	}
	return false
}

// write applies a write at once, or holds it for the latency.
func (f *faultyGlobal) write(ctx context.Context, apply func(ctx context.Context, now int64) error) error {
	now := f.clock.milli()
	if f.latency == 0 {
		return apply(ctx, now)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = append(f.pending, heldWrite{due: now + f.latency, apply: apply})
	return nil
}

// land applies the held writes that are due, at the time they were due.
func (f *faultyGlobal) land(ctx context.Context) {
	now := f.clock.milli()
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.pending) > 0 && f.pending[0].due <= now {
		w := f.pending[0]
		f.pending = f.pending[1:]
		_ = w.apply(ctx, w.due) // the memory store does not fail
	}
}

// Publish implements [global.Store].
func (f *faultyGlobal) Publish(ctx context.Context, region string, counts []global.Count, now int64) error {
	if f.call(ctx) {
		return global.ErrUnavailable
	}
	f.n.published.Add(int64(len(counts)))
	rows, statements := mysql.PublishCost(mysql.Config{}, counts)
	f.n.rows.Add(int64(rows))
	f.n.statements.Add(int64(statements))
	counts = slices.Clone(counts)
	return f.write(ctx, func(ctx context.Context, now int64) error {
		f.n.changes.add(now, counts, rows)
		return f.Store.Publish(ctx, region, counts, now)
	})
}

// Announce implements [global.Store].
func (f *faultyGlobal) Announce(ctx context.Context, region string, now int64) error {
	if f.call(ctx) {
		return global.ErrUnavailable
	}
	f.n.announced.Add(1)
	f.n.wrote(0, 1)
	return f.Store.Announce(ctx, region, now)
}

// Pull implements [global.Store].
func (f *faultyGlobal) Pull(ctx context.Context, region string, cursor global.Cursor, now, activeFor int64) (global.Pull, error) {
	if f.call(ctx) {
		return global.Pull{}, global.ErrUnavailable
	}
	f.n.wrote(0, 1) // the batch rows, the clock and the regions in one statement
	p, err := f.Store.Pull(ctx, region, cursor, now, activeFor)
	if err == nil {
		f.n.readRows(&p, f.n.changes.readRows(region, now), -1)
	}
	return p, err
}

// PullWithDenials implements [global.PullerWithDenials], as the MySQL
// store does: one call, one statement.
func (f *faultyGlobal) PullWithDenials(ctx context.Context, region string, cursor, denialCursor global.Cursor, now, activeFor int64) (global.Pull, []global.Denial, global.Cursor, error) {
	if f.call(ctx) {
		return global.Pull{}, nil, denialCursor, global.ErrUnavailable
	}
	f.n.wrote(0, 1) // the batch rows, the denials, the clock and the regions in one statement
	p, ds, next, err := f.Store.(global.PullerWithDenials).PullWithDenials(ctx, region, cursor, denialCursor, now, activeFor)
	if err == nil {
		f.n.readRows(&p, f.n.changes.readRows(region, now), f.n.changes.readDenialRows(region, now))
	}
	return p, ds, next, err
}

// EmitDenials implements [global.Store].
func (f *faultyGlobal) EmitDenials(ctx context.Context, denials []global.Denial) error {
	if f.call(ctx) {
		return global.ErrUnavailable
	}
	f.n.denials.Add(int64(len(denials)))
	// Each denial sent reads its cell's row (an upsert); only the first
	// of a cell inserts one (see newDenialRows).
	f.n.rowsRead.Add(int64(len(denials)))
	f.n.statements.Add(int64((len(denials) + mysqlChunkRows - 1) / mysqlChunkRows))
	denials = slices.Clone(denials)
	return f.write(ctx, func(ctx context.Context, now int64) error {
		n := f.n.newDenialRows(denials)
		f.n.rows.Add(int64(n))
		f.n.changes.addDenials(now, n)
		return f.Store.EmitDenials(ctx, denials)
	})
}

// Denials implements [global.Store].
func (f *faultyGlobal) Denials(ctx context.Context, region string, cursor global.Cursor, now int64) ([]global.Denial, global.Cursor, error) {
	if f.call(ctx) {
		return nil, cursor, global.ErrUnavailable
	}
	f.n.wrote(0, 1) // the rows and the clock in one statement
	ds, next, err := f.Store.Denials(ctx, region, cursor, now)
	if err == nil {
		f.n.readRows(nil, 0, f.n.changes.readDenialRows(region, now))
	}
	return ds, next, err
}

// Cleanup implements [global.Store].
func (f *faultyGlobal) Cleanup(ctx context.Context, now int64, batch int) (int, error) {
	if f.call(ctx) {
		return 0, global.ErrUnavailable
	}
	f.n.wrote(0, 6) // take the named lock, delete expired batch rows, denials and legacy rows, look for rows to merge, release it
	f.n.cleanedUp(f.n.changes.expired(now), f.n.forgetDenials(now))
	return f.Store.Cleanup(ctx, now, batch)
}

// scheduleOutages returns the outages of s's faults for a run from start:
// those of each region's origin, and those of the global store.
func scheduleOutages(s Scenario, start int64) ([]outages, outages) {
	origins := make([]outages, s.Regions)
	var global outages
	for _, f := range s.Faults {
		iv := [2]int64{start + f.At.Milliseconds(), start + f.Until.Milliseconds()}
		switch f.Kind {
		case OriginOutage:
			for r := range s.Regions {
				if len(f.Regions) == 0 || slices.Contains(f.Regions, r) {
					origins[r] = append(origins[r], iv)
				}
			}
		case GlobalOutage:
			global = append(global, iv)
		}
	}
	return origins, global
}

// changeKind names what happens to a node at a scheduled time.
type changeKind int

const (
	changeRestart changeKind = iota // the limiter restarts on its origin
	changeLose                      // the node dies
	changeDetect                    // its region drops it from the ring
	changeJoin                      // a fresh node joins in its place
)

// change is one scheduled change of a node, at Unix ms at.
type change struct {
	at   int64
	kind changeKind
	node int
	gen  int // changeDetect: the incarnation that was lost
}

// scheduleChanges lists the node changes of s's faults in time order
// (faults' order among equal times), for a run from start.
func scheduleChanges(s Scenario, start int64) []change {
	var cs []change
	gens := map[int]int{} // incarnation of each node, as the losses and joins go
	for _, f := range s.Faults {
		at := start + f.At.Milliseconds()
		switch f.Kind {
		case Restart:
			cs = append(cs, change{at: at, kind: changeRestart, node: f.Node})
		case NodeLoss:
			cs = append(cs, change{at: at, kind: changeLose, node: f.Node})
			if s.Origin == OriginCluster {
				cs = append(cs, change{at: at + s.FailureDetection.Milliseconds(), kind: changeDetect, node: f.Node, gen: gens[f.Node]})
			}
			if f.Until > 0 {
				cs = append(cs, change{at: start + f.Until.Milliseconds(), kind: changeJoin, node: f.Node})
				gens[f.Node]++
			}
		}
	}
	slices.SortStableFunc(cs, func(a, b change) int { return cmp.Compare(a.at, b.at) })
	return cs
}

// apply makes the change to nodes (perRegion to a region).
func (c change) apply(nodes []*node, perRegion int) error {
	n := nodes[c.node]
	region := nodes[n.region*perRegion : (n.region+1)*perRegion]
	switch c.kind {
	case changeRestart:
		n.settle(c.at) // a replay in flight lands before the process stops
		return n.restart()
	case changeLose:
		n.settle(c.at) // so does a lost node's: only what it had not sent is lost
		n.kill()
	case changeDetect:
		if n.gen == c.gen && !n.alive {
			setMembers(region)
		}
	case changeJoin:
		if err := n.join(); err != nil {
			return err
		}
		if n.cluster != nil {
			setMembers(region)
		}
	}
	return nil
}

// rerouter sends the requests of a lost node to another live node of its
// region, picked at random: a load balancer's health check.
type rerouter struct{ rng *rand.Rand }

// live returns i if node i is alive, or a live node of its region.
func (r rerouter) live(nodes []*node, i, perRegion int) int {
	if nodes[i].alive {
		return i
	}
	first := i / perRegion * perRegion
	var alive []int
	for j := first; j < first+perRegion; j++ {
		if nodes[j].alive {
			alive = append(alive, j)
		}
	}
	return alive[r.rng.IntN(len(alive))]
}
