package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
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
)

// DefaultTimeout bounds one peer RPC when the caller's context allows more.
const DefaultTimeout = 250 * time.Millisecond

// maxParked bounds the cells whose deltas wait for an unreachable owner.
const maxParked = 1 << 16

// Merger receives the totals of an owner's exceed broadcast: it raises its
// local view of cell to total (never lowers it). The limiter implements it
// ([sluice.Limiter.MergeRemote]); it must be safe for concurrent use and fast.
type Merger interface {
	MergeRemote(cell origin.Cell, total int64)
}

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
	// RehomeTicks, if set, replaces the re-homing goroutine's own triggers
	// (a ring change, a breaker that opened or closed, and the timer that
	// sends parked deltas again): it runs one [Origin.Rehome] per value
	// received and never on its own. A simulation in virtual time drives
	// re-homing with it, or by calling Rehome itself.
	RehomeTicks <-chan time.Time
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
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
	cfg   Config
	key   []byte // RPC HMAC key
	store *memory.Store
	// seedMu makes a seed (read, then raise) atomic against every other
	// use of store, which holds it shared.
	seedMu sync.RWMutex

	mu   sync.Mutex // serialises SetPeers
	view atomic.Pointer[view]

	merger    atomic.Pointer[Merger]
	broadcast atomic.Pointer[func(exceed)]

	seen    *seen
	parked  *parking
	replays *replays // nonces of the peer calls taken

	rehomeMu sync.Mutex // serialises Rehome
	homed    routing    // the routing of the last hand-over, under rehomeMu

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
		cfg:     cfg,
		key:     rpcKey(cfg.Secret),
		store:   memory.New(cfg.Clock),
		seen:    newSeen(cfg.Clock),
		replays: newReplays(),
		parked:  &parking{cells: map[origin.Cell]int64{}},
		changed: make(chan struct{}, 1),
		ctx:     ctx,
		cancel:  cancel,
	}
	o.view.Store(&view{ring: NewRing(cfg.ID), peers: map[string]*peer{}})
	o.homed = o.routing()
	o.cfg.Observer.Members(1)
	o.wg.Go(o.rehomeLoop)
	return o, nil
}

// ID returns this node's member id.
func (o *Origin) ID() string { return o.cfg.ID }

// Ring returns the ring in force.
func (o *Origin) Ring() *Ring { return o.view.Load().ring }

// SetMerger sets the receiver of exceed broadcasts (the limiter). Until it
// is set, broadcasts are only remembered for re-homing.
func (o *Origin) SetMerger(m Merger) { o.merger.Store(&m) }

// setBroadcaster sets how an exceed is sent to every other member.
func (o *Origin) setBroadcaster(f func(exceed)) { o.broadcast.Store(&f) }

// SetPeers sets the other members: member id to the base URL of its peer
// RPC (http://host:port). This node's own id is ignored. A peer whose
// address is unchanged keeps its breaker. When the set of members changes,
// the cells that moved are handed to their new owners in the background
// (see [Origin.Rehome]).
func (o *Origin) SetPeers(addrs map[string]string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	old := o.view.Load()
	peers := make(map[string]*peer, len(addrs))
	ids := []string{o.cfg.ID}
	for id, addr := range addrs {
		if id == o.cfg.ID {
			continue
		}
		if p := old.peers[id]; p != nil && p.base == addr {
			peers[id] = p
		} else {
			peers[id] = o.newPeer(id, addr)
		}
		ids = append(ids, id)
	}
	ring := NewRing(ids...)
	o.view.Store(&view{ring: ring, peers: peers})
	o.cfg.Observer.Members(ring.Len())
	if !sameMembers(old.ring, ring) {
		o.cfg.Logger.Info("cluster: ring changed", "members", ring.Members())
		select {
		case o.changed <- struct{}{}:
		default:
		}
	}
}

// Peers returns the other members and their RPC base URLs.
func (o *Origin) Peers() map[string]string {
	v := o.view.Load()
	out := make(map[string]string, len(v.peers))
	for id, p := range v.peers {
		out[id] = p.base
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

// routing is a ring and the members whose breaker is not closed, the unit
// of a re-homing: a peer's identities move to their runner-up when its
// breaker opens, and back once it has closed again (a half-open breaker
// changes nothing yet, so the peer is seeded only once it answers).
type routing struct {
	ring *Ring
	down map[string]bool
}

func (o *Origin) routing() routing {
	v := o.view.Load()
	return routing{ring: v.ring, down: v.unsettled()}
}

func (r routing) ownerOf(h uint64) string { return r.ring.ownerSkipping(h, r.down) }

func (r routing) same(other routing) bool {
	return sameMembers(r.ring, other.ring) && maps.Equal(r.down, other.down)
}

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
		counts = origin.Counts{Current: reply.C, Previous: reply.P}
	}
	o.seen.record(origin.Cell{Key: key, Sequence: seq}, counts.Current)
	o.seen.record(origin.Cell{Key: key, Sequence: seq - 1}, counts.Previous)
	return counts, nil
}

// Apply adds each delta at its cell's owner, one batch per owner sent
// concurrently, and returns the totals in order. If no owner could be
// reached, it returns an error and applied nothing this node knows of. If
// only some could, the deltas of the others are kept (parked) and sent with
// the next Apply to whoever owns them then, and their totals are reported
// as 0, which the limiter's max-merge ignores: a retry of the whole batch
// would count the delivered deltas twice.
func (o *Origin) Apply(ctx context.Context, deltas []origin.Delta) ([]int64, error) {
	if err := o.checkOpen(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	parked := o.parked.take(o.cfg.Clock().UnixMilli())
	all := slices.Concat(deltas, parked)
	totals := make([]int64, len(all))
	failed := make([]bool, len(all))

	groups := map[*peer][]int{}
	for i, d := range all {
		p := o.route(d.Cell.Key)
		groups[p] = append(groups[p], i)
	}
	var wg sync.WaitGroup
	for p, idx := range groups {
		batch := make([]origin.Delta, len(idx))
		for j, i := range idx {
			batch[j] = all[i]
		}
		run := func() {
			t, err := o.applyAt(ctx, p, batch)
			for j, i := range idx {
				if err != nil {
					failed[i] = true
				} else {
					totals[i] = t[j]
				}
			}
		}
		if len(groups) == 1 {
			run()
		} else {
			wg.Go(run)
		}
	}
	wg.Wait()

	delivered := 0
	for i := range deltas {
		if !failed[i] {
			delivered++
		}
	}
	if delivered == 0 && len(deltas) > 0 {
		// Nothing of the caller's went through: it keeps its deltas.
		for i := len(deltas); i < len(all); i++ {
			if failed[i] {
				o.parked.add(all[i])
			}
		}
		return nil, fmt.Errorf("%w: no owner of %d cells reachable: %w", ErrPeer, len(deltas), origin.ErrUnavailable)
	}
	for i, d := range all {
		if failed[i] {
			if !o.parked.add(d) {
				o.cfg.Logger.Warn("cluster: too many cells waiting for unreachable owners; dropping an increment", "count", d.Count)
			}
			continue
		}
		o.seen.record(d.Cell, totals[i])
	}
	return totals[:len(deltas)], nil
}

// applyAt applies batch at p (nil: this node).
func (o *Origin) applyAt(ctx context.Context, p *peer, batch []origin.Delta) ([]int64, error) {
	if p == nil {
		return o.localApply(ctx, batch)
	}
	req := applyRequest{D: make([]wireDelta, len(batch))}
	for i, d := range batch {
		req.D[i] = toWireDelta(d)
	}
	var reply applyReply
	if err := o.call(ctx, p, KindApply, req, &reply); err != nil {
		return nil, err
	}
	if len(reply.T) != len(batch) {
		return nil, fmt.Errorf("%w: %d totals for %d deltas", ErrRefused, len(reply.T), len(batch))
	}
	return reply.T, nil
}

// Decide has the owner of c.Key make the strict-mode decisions of c.
func (o *Origin) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	if err := o.checkOpen(); err != nil {
		return origin.Verdict{}, err
	}
	var v origin.Verdict
	if p := o.route(c.Key); p == nil {
		var err error
		if v, err = o.localDecide(ctx, c); err != nil {
			return v, err
		}
	} else {
		var reply decideReply
		if err := o.call(ctx, p, KindDecide, toDecideRequest(c), &reply); err != nil {
			return origin.Verdict{}, err
		}
		if len(reply.A) != len(c.Asks) {
			return origin.Verdict{}, fmt.Errorf("%w: %d verdicts for %d asks", ErrRefused, len(reply.A), len(c.Asks))
		}
		v = origin.Verdict{Admitted: reply.A, Counts: origin.Counts{Current: reply.C, Previous: reply.P}}
	}
	o.seen.record(origin.Cell{Key: c.Key, Sequence: c.Seq}, v.Counts.Current)
	o.seen.record(origin.Cell{Key: c.Key, Sequence: c.Seq - 1}, v.Counts.Previous)
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
func (o *Origin) localApply(ctx context.Context, deltas []origin.Delta) ([]int64, error) {
	o.seedMu.RLock()
	totals, err := o.store.Apply(ctx, deltas)
	o.seedMu.RUnlock()
	if err != nil {
		return nil, err
	}
	for i, d := range deltas {
		if !o.seen.grewSinceBroadcast(d.Cell, totals[i]) {
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

// localSeed raises each cell of this node's store to at least its total.
func (o *Origin) localSeed(ctx context.Context, cells []origin.Delta) error {
	o.seedMu.Lock()
	defer o.seedMu.Unlock()
	for _, d := range cells {
		counts, err := o.store.Load(ctx, d.Cell.Key, d.Cell.Sequence)
		if err != nil {
			return err
		}
		if d.Count > counts.Current {
			if _, err := o.store.Apply(ctx, []origin.Delta{{Cell: d.Cell, Count: d.Count - counts.Current}}); err != nil {
				return err
			}
		}
	}
	return nil
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
	o.seen.record(origin.Cell{Key: key, Sequence: e.S}, e.C)
	o.seen.record(origin.Cell{Key: key, Sequence: e.S - 1}, e.P)
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
		(*m).MergeRemote(origin.Cell{Key: key, Sequence: seq - 1}, counts.Previous)
	}
	(*m).MergeRemote(origin.Cell{Key: key, Sequence: seq}, counts.Current)
}
