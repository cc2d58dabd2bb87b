package redis

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice/internal/breaker"
)

// A shard is the part of Redis one circuit breaker guards: one master of a
// Redis Cluster, or the one server (or Sentinel-managed master) of any
// other client.
type shard struct {
	// master is the address of the master ("host:port"), or "" for the
	// breaker of a client of one server and, on a cluster, for the calls
	// made before the client knew which master serves which slot.
	master string
	// key is a key the master served when the shard was made: while the
	// slot map says it still does, the shard is current.
	key     string
	breaker *gobreaker.CircuitBreaker[struct{}]
}

// shards holds the circuit breakers of an Origin: one for a client of one
// server; one per master for a Redis Cluster client, so that a master that
// fails opens its own breaker and no other. A call looks its master up in
// the cluster client's slot map, which go-redis keeps in memory and
// refreshes in the background, so routing never waits on a master.
type shards struct {
	cluster *goredis.ClusterClient // nil: a client of one server
	// one is the breaker of a client of one server. On a cluster it guards
	// the calls made while the client has no slot map yet: such a call
	// loads the map first (routed is false until one did).
	one    *shard
	routed atomic.Bool
	// loading is the load of the slot map under way, if any (under
	// loadMu); timeout bounds it.
	loadMu  sync.Mutex
	loading *mapLoad
	timeout time.Duration
	// byMaster maps a master's address to its shard. It is copied on
	// write (under addMu): masters are few and rarely new, and a call
	// reads it without a lock.
	byMaster atomic.Pointer[map[string]*shard]
	addMu    sync.Mutex
	newShard func(master, key string) *shard

	// stateMu guards states and worst: the last state each breaker
	// reported, and the most severe of them, which Observer.BreakerChanged
	// reports.
	stateMu sync.Mutex
	states  map[string]BreakerState
	worst   BreakerState
	log     *slog.Logger
	obs     Observer
}

// newShards returns the breakers for client, each made with b; timeout
// bounds a load of a cluster client's slot map.
func newShards(client goredis.UniversalClient, timeout time.Duration, b BreakerConfig, log *slog.Logger, obs Observer) *shards {
	s := &shards{timeout: timeout, log: log, obs: obs, states: map[string]BreakerState{}}
	s.cluster, _ = client.(*goredis.ClusterClient)
	s.newShard = func(master, key string) *shard {
		sh := &shard{master: master, key: key}
		name := "redis-origin"
		if master != "" {
			name += " " + master
		}
		sh.breaker = breaker.New(breaker.Settings{
			Name:           name,
			ReadyToTrip:    readyToTrip(b),
			Window:         b.Window,
			HalfOpenProbes: b.HalfOpenProbes,
			OpenTimeout:    b.OpenTimeout,
			OnChange:       func(from, to BreakerState) { s.changed(sh, from, to) },
		})
		return sh
	}
	s.one = s.newShard("", "")
	s.byMaster.Store(&map[string]*shard{})
	return s
}

// A route is where one call goes: the shard whose breaker it goes through
// and, when the client did not know the master of the call's cells, the
// key whose master the call looks up first (see wrap).
type route struct {
	shard *shard
	learn string // "": the master was known
}

// route returns the route of a call on key: the shard of the master that
// serves key. While a cluster client has no slot map yet, the call goes
// through the shard of unknown masters and loads the map itself.
func (s *shards) route(ctx context.Context, key string) route {
	if s.cluster == nil {
		return route{shard: s.one}
	}
	if !s.routed.Load() {
		return route{shard: s.one, learn: key}
	}
	node, err := s.cluster.MasterForKey(ctx, key) // the map in memory: no I/O
	if err != nil {
		return route{shard: s.one, learn: key} // the client is closed: the call fails on its own
	}
	return route{shard: s.at(node.Options().Addr, key)}
}

// at returns the shard of the master at addr, adding it, made for key, if
// it is new. A new master is one the slot map did not name before (a
// failover's promoted replica, for one): at forgets the shards of the
// masters that no longer serve the key they were made for.
func (s *shards) at(addr, key string) *shard {
	if sh, ok := (*s.byMaster.Load())[addr]; ok {
		return sh
	}
	s.addMu.Lock()
	defer s.addMu.Unlock()
	m := *s.byMaster.Load()
	if sh, ok := m[addr]; ok {
		return sh
	}
	sh := s.newShard(addr, key)
	next := map[string]*shard{addr: sh}
	var gone []*shard
	for a, old := range m {
		node, err := s.cluster.MasterForKey(context.Background(), old.key) // the map in memory: no I/O
		if err == nil && node.Options().Addr != a {
			gone = append(gone, old)
			continue
		}
		next[a] = old
	}
	s.byMaster.Store(&next)
	for _, old := range gone {
		s.retire(old)
	}
	return sh
}

// current reports whether sh is in use: the shard of unknown masters until
// a cluster client's slot map is known (always, on a client of one
// server), a master's shard until at forgets it.
func (s *shards) current(sh *shard) bool {
	if sh == s.one {
		return s.cluster == nil || !s.routed.Load()
	}
	return (*s.byMaster.Load())[sh.master] == sh
}

// changed records that the breaker of sh went from one state to another:
// it logs the change, reports it to a MasterObserver for a cluster's
// master, and reports a change of the most severe state of the breakers
// in use to Observer.BreakerChanged. A breaker no longer in use (whose
// last calls end) is not recorded. It runs while the changing breaker
// holds its lock and takes no other breaker's.
//
// When a master's breaker opens, changed has the cluster client reload its
// slot map in the background: go-redis otherwise reloads it every minute,
// or on a MOVED reply, which a hung master never sends, so a replica
// promoted in its place would get no call until then.
func (s *shards) changed(sh *shard, from, to BreakerState) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if !s.current(sh) {
		return
	}
	attrs := []any{slog.String("from", from.String()), slog.String("to", to.String())}
	if sh.master != "" {
		attrs = append(attrs, slog.String("master", sh.master))
	}
	s.log.Log(context.Background(), to.LogLevel(), "redis origin: circuit breaker "+to.String(), attrs...)
	s.states[sh.master] = to
	if mo, ok := s.obs.(MasterObserver); ok && sh.master != "" {
		mo.MasterBreakerChanged(sh.master, from, to)
	}
	s.reportWorst()
	if to == BreakerOpen && sh.master != "" {
		s.cluster.ReloadState(context.Background()) // returns at once
	}
}

// retire drops the recorded state of sh, a breaker no longer in use: a
// master that no longer serves slots, or the shard of unknown masters once
// the slot map is known. A master's breaker that was not closed is reported
// closed to a MasterObserver (a new one for the address starts closed).
func (s *shards) retire(sh *shard) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	last, known := s.states[sh.master]
	delete(s.states, sh.master)
	if sh.master != "" {
		s.log.Info("redis origin: circuit breaker of a former master dropped", slog.String("master", sh.master),
			slog.String("state", last.String()))
		if mo, ok := s.obs.(MasterObserver); ok && known && last != BreakerClosed {
			mo.MasterBreakerChanged(sh.master, last, BreakerClosed)
		}
	}
	s.reportWorst()
}

// reportWorst reports a change of the most severe recorded state to
// Observer.BreakerChanged. The caller holds stateMu.
func (s *shards) reportWorst() {
	worst := BreakerClosed
	for _, st := range s.states {
		worst = max(worst, st)
	}
	if worst != s.worst {
		s.obs.BreakerChanged(s.worst, worst)
		s.worst = worst
	}
}

// all returns every shard in use.
func (s *shards) all() []*shard {
	m := *s.byMaster.Load()
	out := make([]*shard, 0, 1+len(m))
	if s.current(s.one) {
		out = append(out, s.one)
	}
	for _, sh := range m {
		out = append(out, sh)
	}
	return out
}

// state returns the current state of sh's breaker: an open breaker whose
// OpenTimeout has passed reports (and becomes) half-open.
func (sh *shard) state() BreakerState {
	return breaker.StateOf(sh.breaker.State())
}

// BreakerState returns the state of the origin's circuit breaker: for a
// client of one server, its one breaker; for a Redis Cluster, the most
// severe state of the breakers in use (open if one master's is open,
// whatever the others'): those of its masters and, until the client knows
// the cluster's slot map, the one its calls go through meanwhile. An open
// breaker whose OpenTimeout has passed reports (and becomes) half-open.
func (o *Origin) BreakerState() BreakerState {
	worst := BreakerClosed
	for _, sh := range o.shards.all() {
		worst = max(worst, sh.state())
	}
	return worst
}

// BreakerStates returns the state of the circuit breaker of each master of
// a Redis Cluster the origin has sent a call to, by address ("host:port"
// as the cluster announces it). A master that stopped serving its slots (a
// failover) leaves it when the origin first calls a master it did not know.
// It is empty for a client of one server, whose one breaker BreakerState
// reports. An open breaker whose OpenTimeout has passed reports (and
// becomes) half-open.
func (o *Origin) BreakerStates() map[string]BreakerState {
	m := *o.shards.byMaster.Load()
	out := make(map[string]BreakerState, len(m))
	for addr, sh := range m {
		out[addr] = sh.state()
	}
	return out
}
