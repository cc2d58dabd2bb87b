package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// Errors of this package. Calls that could not reach an owner also wrap
// [origin.ErrUnavailable], so the limiter decides locally.
var (
	// ErrClosed is returned by calls made after [Origin.Close].
	ErrClosed = errors.New("cluster: origin is closed")
	// ErrInvalidConfig is returned by [New] and [Join] for a bad Config.
	ErrInvalidConfig = errors.New("cluster: invalid config")
	// ErrRefused is returned when a peer refused a call: it failed
	// authentication or the request was malformed.
	ErrRefused = errors.New("cluster: peer refused the call")
	// ErrPeer is returned when a peer could not be reached or failed.
	ErrPeer = errors.New("cluster: peer unreachable")
	// ErrNotOwner is returned, wrapped with [origin.ErrUnavailable], for a
	// delta a peer refused because it neither owns its cell nor stands in
	// for the owner (its view of the ring differs from this node's, for a
	// moment): nothing was counted, and the limiter sends it again to
	// whoever owns the cell then.
	ErrNotOwner = errors.New("cluster: the peer does not own the cell")
)

// DefaultTimeout bounds one peer RPC when the caller's context allows more.
const DefaultTimeout = 250 * time.Millisecond

// DefaultMaxCells is Config.MaxCells when it is not set: the limiter's
// default MaxCounters.
const DefaultMaxCells = 5_000_000

// BreakerConfig tunes the circuit breaker of each peer.
type BreakerConfig struct {
	// ConsecutiveFailures opens the breaker. Default 3.
	ConsecutiveFailures uint32
	// OpenTimeout is how long an open breaker rejects calls before it lets
	// one probe through. Default 1s.
	OpenTimeout time.Duration
}

// Config configures an [Origin].
type Config struct {
	// ID is this node's member id, unique in the cluster. Required.
	ID string
	// Secret authenticates the peer RPC (an HMAC of each call). Every member
	// must have the same one.
	Secret string
	// Timeout bounds one peer RPC. Default DefaultTimeout.
	Timeout time.Duration
	// Client sends the peer RPC. Default: HTTP/2 without TLS (h2c).
	Client *http.Client
	// Breaker tunes each peer's circuit breaker.
	Breaker BreakerConfig
	// Logger defaults to slog.Default(); Observer to NopObserver; Clock to
	// time.Now.
	Logger   *slog.Logger
	Observer Observer
	Clock    func() time.Time
	// MaxCells caps the cells this node holds as an owner (its
	// origin/memory store), and the cells it remembers to seed their next
	// owner at twice that (the cells its own limiter uses and those it
	// owns). Past a cap, a new cell evicts one, fairly across workspaces,
	// the least recently used first (see [memory.WithMaxCells] for the
	// rule and what an eviction costs). Default DefaultMaxCells.
	MaxCells int
	// MaxCellsPerWorkspace, if set, caps one workspace's cells in both the
	// same way (twice it for the cells remembered). Default 0: no cap but
	// MaxCells.
	MaxCellsPerWorkspace int
	// RehomeTicks, if set, replaces the re-homing goroutine's own triggers
	// (a ring change, a member that restarted, a breaker that opened or
	// closed, and the timer that sends refused seeds again): it runs one
	// [Origin.Rehome] per value
	// received and never on its own. A simulation in virtual time drives
	// re-homing with it, or by calling Rehome itself.
	RehomeTicks <-chan time.Time
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxCells <= 0 {
		c.MaxCells = DefaultMaxCells
	}
	if c.Client == nil {
		tr := &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: 90 * time.Second}
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
		c.Client = &http.Client{Transport: tr}
	}
	if c.Breaker.ConsecutiveFailures == 0 {
		c.Breaker.ConsecutiveFailures = 3
	}
	if c.Breaker.OpenTimeout <= 0 {
		c.Breaker.OpenTimeout = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c
}

// Member is how this node reaches another member: the base URL of its peer
// RPC (http://host:port) and its incarnation, the random id it drew at
// start ([Origin.Incarnation]), which every call to it is signed for. A
// [Membership] learns both from the member's gossip metadata.
type Member struct {
	RPC         string
	Incarnation string
}

// view is the ring and the peers it routes to, swapped as one.
type view struct {
	ring  *Ring
	peers map[string]*peer // by member id, without this node
}

// Origin is an [origin.Origin] whose cells live on the cluster's members:
// each call goes to the owner of its identity, this node's own store when
// it owns it. Create it with [New]; a [Membership] keeps its members up to
// date ([Origin.SetPeers]). It is safe for concurrent use.
type Origin struct {
	cfg         Config
	key         []byte // RPC HMAC key
	incarnation string // this run's random id, which calls to it are signed for
	store       *memory.Store
	// seedMu makes a seed (read, then raise) atomic against every other
	// use of store, which holds it shared.
	seedMu sync.RWMutex

	mu   sync.Mutex // serialises SetPeers
	view atomic.Pointer[view]

	merger    atomic.Pointer[func(origin.Cell, int64)]
	broadcast atomic.Pointer[func(exceed)]
	analytics atomic.Pointer[AnalyticsAnswer]

	seen     *seen
	replays  *replays     // nonces of the peer calls taken
	inflight atomic.Int64 // bytes of the peer call bodies being read
	rpcLog   *logGate     // refused peer calls

	rehomeMu sync.Mutex    // serialises Rehome
	homed    routing       // the routing of the last hand-over, under rehomeMu
	pending  []pendingSeed // seeds refused by their owner, under rehomeMu

	changed chan struct{} // the ring changed: re-home
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closed  atomic.Bool
	once    sync.Once
}

var _ origin.Origin = (*Origin)(nil)

// New returns the Origin of member cfg.ID, alone on its ring until
// [Origin.SetPeers], and starts its re-homing goroutine; stop it with Close.
func New(cfg Config) (*Origin, error) {
	if cfg.ID == "" {
		return nil, fmt.Errorf("%w: empty ID", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	o := &Origin{
		cfg:         cfg,
		key:         rpcKey(cfg.Secret),
		incarnation: newIncarnation(),
		store:       memory.New(cfg.Clock, memory.WithMaxCells(cfg.MaxCells), memory.WithMaxCellsPerTenant(cfg.MaxCellsPerWorkspace)),
		seen:        newSeen(cfg.Clock, 2*cfg.MaxCells, 2*cfg.MaxCellsPerWorkspace),
		replays:     newReplays(),
		rpcLog:      newLogGate(cfg.Logger, LogRPC, cfg.Observer),
		changed:     make(chan struct{}, 1),
		ctx:         ctx,
		cancel:      cancel,
	}
	o.view.Store(&view{ring: NewRing(cfg.ID), peers: map[string]*peer{}})
	o.homed = o.routing()
	o.cfg.Observer.Members(1)
	o.wg.Go(o.rehomeLoop)
	return o, nil
}

// ID returns this node's member id.
func (o *Origin) ID() string { return o.cfg.ID }

// Incarnation returns the random id this node drew at start (128 bits, in
// hex). Its peers sign every call for it, so a call captured before a
// restart is refused after it: the nonces of the calls taken are kept in
// memory only, and the incarnation is what a restart cannot reuse.
func (o *Origin) Incarnation() string { return o.incarnation }

// Ring returns the ring in force.
func (o *Origin) Ring() *Ring { return o.view.Load().ring }

// OnPush implements [origin.Pusher]: f receives the totals of the owners'
// exceed broadcasts (sluice.New sets it to the limiter's). Until it is set,
// broadcasts are only remembered for re-homing.
func (o *Origin) OnPush(f func(cell origin.Cell, total int64)) { o.merger.Store(&f) }

// setBroadcaster sets how an exceed is sent to every other member.
func (o *Origin) setBroadcaster(f func(exceed)) { o.broadcast.Store(&f) }

// SetPeers sets the other members: member id to how to reach it. This
// node's own id is ignored. A peer whose address and incarnation are
// unchanged keeps its breaker. When the set of members changes, or a
// member's incarnation does (it restarted, and lost the cells it owned),
// the cells that moved or were lost are handed to their owners in the
// background (see [Origin.Rehome]).
func (o *Origin) SetPeers(members map[string]Member) {
	o.mu.Lock()
	defer o.mu.Unlock()
	old := o.view.Load()
	peers := make(map[string]*peer, len(members))
	ids := []string{o.cfg.ID}
	restarted := false
	for id, m := range members {
		if id == o.cfg.ID {
			continue
		}
		p := old.peers[id]
		switch {
		case p != nil && p.base == strings.TrimRight(m.RPC, "/") && p.incarnation == m.Incarnation:
			peers[id] = p
		default:
			restarted = restarted || (p != nil && p.incarnation != m.Incarnation)
			peers[id] = o.newPeer(id, m)
		}
		ids = append(ids, id)
	}
	ring := NewRing(ids...)
	o.view.Store(&view{ring: ring, peers: peers})
	o.cfg.Observer.Members(ring.Len())
	changed := !sameMembers(old.ring, ring)
	if changed {
		o.cfg.Logger.Info("cluster: ring changed", "members", ring.Members())
	}
	if changed || restarted {
		select {
		case o.changed <- struct{}{}:
		default:
		}
	}
}

// Peers returns the other members and how to reach them.
func (o *Origin) Peers() map[string]Member {
	v := o.view.Load()
	out := make(map[string]Member, len(v.peers))
	for id, p := range v.peers {
		out[id] = Member{RPC: p.base, Incarnation: p.incarnation}
	}
	return out
}

func sameMembers(a, b *Ring) bool {
	return maps.Equal(ringSet(a), ringSet(b))
}

func ringSet(r *Ring) map[string]bool {
	m := make(map[string]bool, r.Len())
	for _, id := range r.ids {
		m[id] = true
	}
	return m
}

// route returns the member that decides key's calls: nil for this node.
// That is its owner, unless the owner's breaker is open: then the runner-up
// among the members whose breaker is not open stands in for it, so that
// every node that has given up on the owner converges on one stand-in
// (seeded by rehome) rather than deciding alone until the failure detector
// removes the owner from the ring.
func (o *Origin) route(key origin.Key) *peer {
	v := o.view.Load()
	h := KeyHash(key)
	owner := v.ring.ownerOf(h)
	if owner == o.cfg.ID {
		return nil
	}
	p := v.peers[owner]
	if p == nil || !p.open() {
		return p // p is never nil: every ring member but this node is a peer
	}
	alt := v.ring.ownerSkipping(h, v.down())
	if alt == o.cfg.ID {
		return nil
	}
	if q := v.peers[alt]; q != nil {
		return q
	}
	return p
}

// down returns the peers whose breaker is open (routed around).
func (v *view) down() map[string]bool { return v.peersWhere((*peer).open) }

// downIDs returns the ids of down, sorted: what a call tells its receiver
// the sender routes around.
func (v *view) downIDs() []string { return slices.Sorted(maps.Keys(v.down())) }

// unsettled returns the peers whose breaker is not closed: open, or
// half-open while a call probes whether the peer answers again.
func (v *view) unsettled() map[string]bool {
	return v.peersWhere(func(p *peer) bool { return !p.closed() })
}

func (v *view) peersWhere(f func(*peer) bool) map[string]bool {
	var m map[string]bool
	for id, p := range v.peers {
		if f(p) {
			if m == nil {
				m = map[string]bool{}
			}
			m[id] = true
		}
	}
	return m
}

// routing is a ring, the members whose breaker is not closed and the
// incarnation of every member, the unit of a re-homing: a peer's
// identities move to their runner-up when its breaker opens, and back once
// it has closed again (a half-open breaker changes nothing yet, so the
// peer is seeded only once it answers); a member that restarted (a new
// incarnation) lost its cells, and is seeded again.
type routing struct {
	ring *Ring
	down map[string]bool
	incs map[string]string // member id -> incarnation
}

func (o *Origin) routing() routing {
	v := o.view.Load()
	incs := map[string]string{o.cfg.ID: o.incarnation}
	for id, p := range v.peers {
		incs[id] = p.incarnation
	}
	return routing{ring: v.ring, down: v.unsettled(), incs: incs}
}

func (r routing) ownerOf(h uint64) string { return r.ring.ownerSkipping(h, r.down) }

func (r routing) same(other routing) bool {
	return sameMembers(r.ring, other.ring) && maps.Equal(r.down, other.down) && maps.Equal(r.incs, other.incs)
}

// skipped returns the ids of down, sorted: what a seed tells its receiver
// the sender routes around.
func (r routing) skipped() []string { return slices.Sorted(maps.Keys(r.down)) }

// Close stops the re-homing goroutine, closes the peer RPC's idle
// connections and fails later calls with [ErrClosed]. Calls in flight
// finish. It is idempotent and returns nil.
func (o *Origin) Close() error {
	o.once.Do(func() {
		o.closed.Store(true)
		o.cancel()
		o.wg.Wait()
		o.cfg.Client.CloseIdleConnections()
	})
	return nil
}

func (o *Origin) checkOpen() error {
	if o.closed.Load() {
		return fmt.Errorf("%w: %w", ErrClosed, origin.ErrUnavailable)
	}
	return nil
}

// Load returns the totals of cells seq and seq-1 of key from its owner.
func (o *Origin) Load(ctx context.Context, key origin.Key, seq int64) (origin.Counts, error) {
	if err := o.checkOpen(); err != nil {
		return origin.Counts{}, err
	}
	if err := checkKey(key); err != nil {
		return origin.Counts{}, err
	}
	var counts origin.Counts
	if p := o.route(key); p == nil {
		var err error
		if counts, err = o.localLoad(ctx, key, seq); err != nil {
			return counts, err
		}
	} else {
		var reply countsReply
		if err := o.call(ctx, p, KindLoad, loadRequest{K: toWireKey(key), S: seq}, &reply); err != nil {
			return origin.Counts{}, err
		}
		counts = reply.counts()
	}
	o.seen.record(origin.Cell{Key: key, Sequence: seq}, counts.Current, counts.Imported.Current)
	o.seen.record(origin.Cell{Key: key, Sequence: seq - 1}, counts.Previous, counts.Imported.Previous)
	return counts, nil
}

// Apply raises each delta at its cell's owner, one batch per owner sent
// concurrently, and returns the totals in order. If no owner could be
// reached, it returns an error. If only some could, the error wraps an
// [*origin.CellErrors] naming the cells of the others (each error wraps
// origin.ErrUnavailable), whose totals are 0: the limiter sends them again,
// to whoever owns them then. A write carries its writer's whole count, so
// sending again never counts twice; nothing waits here for an owner.
func (o *Origin) Apply(ctx context.Context, deltas []origin.Delta) ([]origin.Total, error) {
	if err := o.checkOpen(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	totals := make([]origin.Total, len(deltas))
	errs := make([]error, len(deltas))
	groups := map[*peer][]int{}
	for i, d := range deltas {
		if err := checkKey(d.Cell.Key); err != nil {
			errs[i] = err
			continue
		}
		p := o.route(d.Cell.Key)
		groups[p] = append(groups[p], i)
	}
	var wg sync.WaitGroup
	for p, idx := range groups {
		run := func() { o.applyGroup(ctx, p, deltas, idx, totals, errs) }
		if len(groups) == 1 {
			run()
		} else {
			wg.Go(run)
		}
	}
	wg.Wait()

	failed := map[int]error{}
	for i, err := range errs {
		if err != nil {
			failed[i] = err
		}
	}
	switch {
	case len(failed) == 0:
		return totals, nil
	case len(failed) == len(deltas):
		return nil, fmt.Errorf("%w: no owner of %d cells reachable: %w", ErrPeer, len(deltas), origin.ErrUnavailable)
	default:
		return totals, fmt.Errorf("cluster: apply: %w", &origin.CellErrors{Failed: failed})
	}
}

// applyGroup applies the deltas at indexes idx, all owned by p (nil: this
// node), and fills in their totals, or their errors, and what this node
// has seen of them.
func (o *Origin) applyGroup(ctx context.Context, p *peer, deltas []origin.Delta, idx []int, totals []origin.Total, errs []error) {
	batch := make([]origin.Delta, len(idx))
	for j, i := range idx {
		batch[j] = deltas[i]
	}
	t, failed := o.applyAt(ctx, p, batch)
	for j, i := range idx {
		if err := failed[j]; err != nil {
			errs[i] = fmt.Errorf("%w: %w", origin.ErrUnavailable, err)
			continue
		}
		totals[i] = t[j]
		o.seen.recordWrite(batch[j].Cell, t[j].Count, t[j].Imported, batch[j].Writer, batch[j].Sent)
	}
}

// applyAt applies batch at p (nil: this node) and returns the totals, and
// the error of each delta that was not applied (nil where it was): p could
// not be reached, or p refused a delta whose cell it neither owns nor
// stands in for ([ErrNotOwner]). The batch goes in calls of at most
// maxCallCells deltas and maxBody bytes.
func (o *Origin) applyAt(ctx context.Context, p *peer, batch []origin.Delta) ([]origin.Total, []error) {
	failed := make([]error, len(batch))
	if p == nil {
		totals, err := o.localApply(ctx, batch)
		if err != nil {
			for i := range failed {
				failed[i] = err
			}
		}
		return totals, failed
	}
	totals := make([]origin.Total, len(batch))
	wire := make([]wireDelta, len(batch))
	for i, d := range batch {
		wire[i] = toWireDelta(d)
	}
	bodies, firsts, err := packAll(wire, o.view.Load().downIDs())
	if err != nil {
		for i := range failed {
			failed[i] = err
		}
		return totals, failed
	}
	for c, body := range bodies {
		from, to := firsts[c], len(batch)
		if c+1 < len(firsts) {
			to = firsts[c+1]
		}
		o.applyCall(ctx, p, body, totals[from:to], failed[from:to])
	}
	return totals, failed
}

// applyCall sends one apply call of len(totals) deltas to p and fills in
// their totals or errors.
func (o *Origin) applyCall(ctx context.Context, p *peer, body []byte, totals []origin.Total, failed []error) {
	var reply applyReply
	err := o.callBody(ctx, p, KindApply, body, &reply)
	if err == nil && len(reply.T) != len(totals) {
		err = fmt.Errorf("%w: %d totals for %d deltas", ErrRefused, len(reply.T), len(totals))
	}
	if err != nil {
		for i := range failed {
			failed[i] = err
		}
		return
	}
	for i, n := range reply.T {
		totals[i].Count = n
		if len(reply.I) == len(reply.T) {
			totals[i].Imported = reply.I[i]
		}
	}
	for _, i := range reply.Refused {
		if i >= 0 && i < len(failed) {
			failed[i] = fmt.Errorf("cluster: apply at %s: %w", p.id, ErrNotOwner)
		}
	}
}

// Decide has the owner of c.Key make the strict-mode decisions of c.
func (o *Origin) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	if err := o.checkOpen(); err != nil {
		return origin.Verdict{}, err
	}
	if err := checkKey(c.Key); err != nil {
		return origin.Verdict{}, err
	}
	var v origin.Verdict
	if p := o.route(c.Key); p == nil {
		var err error
		if v, err = o.localDecide(ctx, c); err != nil {
			return v, err
		}
	} else {
		var err error
		if v, err = o.remoteDecide(ctx, p, c); err != nil {
			return origin.Verdict{}, err
		}
	}
	o.seen.recordWrite(origin.Cell{Key: c.Key, Sequence: c.Seq}, v.Counts.Current, v.Counts.Imported.Current, c.Writer, v.Share)
	o.seen.record(origin.Cell{Key: c.Key, Sequence: c.Seq - 1}, v.Counts.Previous, v.Counts.Imported.Previous)
	return v, nil
}

// The owner's side: this node's store.

func (o *Origin) localLoad(ctx context.Context, key origin.Key, seq int64) (origin.Counts, error) {
	o.seedMu.RLock()
	defer o.seedMu.RUnlock()
	return o.store.Load(ctx, key, seq)
}

// localApply applies deltas to this node's store. A cell broadcast as
// exhausted whose total grew since (increments that were on their way when
// the owner decided it, or admitted by nodes on stale views) is broadcast
// again with its new total, so the other nodes' views catch up with it.
func (o *Origin) localApply(ctx context.Context, deltas []origin.Delta) ([]origin.Total, error) {
	o.seedMu.RLock()
	totals, err := o.store.Apply(ctx, deltas)
	o.seedMu.RUnlock()
	if err != nil {
		return nil, err
	}
	for i, d := range deltas {
		if !o.seen.grewSinceBroadcast(d.Cell, totals[i].Count) {
			continue
		}
		counts, err := o.localLoad(ctx, d.Cell.Key, d.Cell.Sequence)
		if err == nil {
			o.broadcastCounts(d.Cell.Key, d.Cell.Sequence, counts)
		}
	}
	return totals, nil
}

// localDecide decides c on this node's store and, if that left the counter
// at its limit, broadcasts the counter's totals.
func (o *Origin) localDecide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	o.seedMu.RLock()
	v, err := o.store.Decide(ctx, c)
	o.seedMu.RUnlock()
	if err != nil {
		return v, err
	}
	if exhausted(c, v) {
		o.exceeded(c.Key, c.Seq, v.Counts)
	}
	return v, nil
}

// exhausted reports whether the decision of c left its counter at its limit:
// an ask was denied, or the usage after the last ask leaves no unit under
// its limit.
func exhausted(c origin.Check, v origin.Verdict) bool {
	if len(c.Asks) == 0 {
		return false
	}
	for _, ok := range v.Admitted {
		if !ok {
			return true
		}
	}
	usage := c.Before(window.Add(v.Counts.Current, c.Imported.Current), window.Add(v.Counts.Previous, c.Imported.Previous))
	return usage >= c.Asks[len(c.Asks)-1].Limit
}

// localSeed raises each cell of this node's store to at least its total,
// and its writers' shares to at least theirs.
func (o *Origin) localSeed(seeds []seed) {
	o.seedMu.Lock()
	defer o.seedMu.Unlock()
	for _, sd := range seeds {
		o.store.Seed(sd.Cell, sd.Total, sd.Imported, sd.Shares)
	}
}

// exceeded tells every member that key is at its limit: the totals of cell
// seq and seq-1. A cell is broadcast again only when its total grew.
func (o *Origin) exceeded(key origin.Key, seq int64, counts origin.Counts) {
	cell := origin.Cell{Key: key, Sequence: seq}
	if !o.seen.markBroadcast(cell, counts.Current) {
		return
	}
	o.broadcastCounts(key, seq, counts)
}

// broadcastCounts merges the counter's totals into this node's limiter and
// sends them to every other member.
func (o *Origin) broadcastCounts(key origin.Key, seq int64, counts origin.Counts) {
	o.mergeLocal(key, seq, counts)
	if f := o.broadcast.Load(); f != nil {
		(*f)(exceed{K: toWireKey(key), S: seq, C: counts.Current, P: counts.Previous})
		o.cfg.Observer.BroadcastSent()
	}
}

// receive merges an exceed broadcast into this node's view.
func (o *Origin) receive(e exceed) {
	if !e.K.valid() || o.closed.Load() {
		return
	}
	o.cfg.Observer.BroadcastReceived()
	key := e.K.key()
	counts := origin.Counts{Current: e.C, Previous: e.P}
	o.seen.record(origin.Cell{Key: key, Sequence: e.S}, e.C, 0)
	o.seen.record(origin.Cell{Key: key, Sequence: e.S - 1}, e.P, 0)
	o.seen.markBroadcast(origin.Cell{Key: key, Sequence: e.S}, e.C)
	o.mergeLocal(key, e.S, counts)
}

// mergeLocal raises this node's limiter to counts.
func (o *Origin) mergeLocal(key origin.Key, seq int64, counts origin.Counts) {
	m := o.merger.Load()
	if m == nil {
		return
	}
	if counts.Previous > 0 {
		(*m)(origin.Cell{Key: key, Sequence: seq - 1}, counts.Previous)
	}
	(*m)(origin.Cell{Key: key, Sequence: seq}, counts.Current)
}

// checkKey refuses a key whose names exceed MaxKeyBytes.
func checkKey(k origin.Key) error {
	if n := keyBytes(k); n > MaxKeyBytes {
		return fmt.Errorf("%w: %d bytes of names, over the cap of %d", ErrKeyTooLong, n, MaxKeyBytes)
	}
	return nil
}

// packAll encodes entries and packs them into call bodies (see pack).
func packAll[T any](entries []T, skip []string) (bodies [][]byte, firsts []int, err error) {
	encoded, err := encodeAll(entries)
	if err != nil {
		return nil, nil, err
	}
	return pack(encoded, skip)
}
