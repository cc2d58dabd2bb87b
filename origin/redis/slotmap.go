package redis

import (
	"context"
	"fmt"
)

// A cluster client knows no slot map until its first call. Until one lookup
// has loaded it, calls go through the shard of unknown masters and load the
// map first (see shards.wrap).

// mapLookups is the number of lookups a load of the slot map runs at once.
const mapLookups = 6

// mapLoad is one load of a cluster client's slot map, shared by the calls
// that need it meanwhile.
type mapLoad struct {
	done chan struct{}
	err  error // set before done is closed
}

// wrap returns the function a call on r runs through r's breaker: fn, after
// the slot map was loaded (see learnMap) when r says the call must. The
// first load that succeeds ends the use of the shard of unknown masters:
// later calls go to their master's breaker.
func (s *shards) wrap(r route, fn func(context.Context) error) func(context.Context) error {
	if r.learn == "" {
		return fn
	}
	return func(ctx context.Context) error {
		if err := s.learnMap(ctx, r.learn); err != nil {
			return fmt.Errorf("redis: cluster slot map: %w", err)
		}
		if s.routed.CompareAndSwap(false, true) {
			s.retire(s.one)
		}
		return fn(ctx)
	}
}

// learnMap has the cluster client load its slot map, by looking up key's
// master, and returns when it did, when the load failed, or when ctx ends.
// Concurrent calls share one load (see loadMap); a call after a failed load
// starts another.
func (s *shards) learnMap(ctx context.Context, key string) error {
	s.loadMu.Lock()
	l := s.loading
	if l == nil {
		l = &mapLoad{done: make(chan struct{})}
		s.loading = l
		go s.loadMap(l, key)
	}
	s.loadMu.Unlock()
	select {
	case <-l.done:
		return l.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loadMap loads the slot map for l by looking up key's master, within the
// origin's Timeout. go-redis loads the map from one node after another, in
// a random order, so a lookup whose first node hangs fails: loadMap runs
// mapLookups lookups at once, each in its own order, and ends l as soon as
// one succeeded, or when all failed. The others are canceled and end by the
// Timeout (go-redis does not cut a connection's handshake short on
// cancellation).
func (s *shards) loadMap(l *mapLoad, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	errs := make(chan error, mapLookups) // never blocks a lookup that ends late
	for range mapLookups {
		go func() {
			_, err := s.cluster.MasterForKey(ctx, key)
			errs <- err
		}()
	}
	for i := range mapLookups {
		err := <-errs
		if err == nil || i == mapLookups-1 {
			l.err = err
			break
		}
	}
	s.loadMu.Lock()
	s.loading = nil
	s.loadMu.Unlock()
	close(l.done)
}
