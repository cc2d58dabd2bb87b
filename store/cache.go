package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultRefresh is the default period of a [Cache]'s refresh loop.
const DefaultRefresh = 2 * time.Second

// ErrInvalidConfig is returned, wrapped with the reason, by
// [CacheConfig.Validate] and [NewCache].
var ErrInvalidConfig = errors.New("store: invalid config")

// CacheConfig configures a [Cache].
type CacheConfig struct {
	// Store is the durable record. Required.
	Store Store
	// Refresh is the period at which the cache re-reads the whole store, and
	// so the longest a change made on another node stays invisible here. A
	// store that implements [Watcher] also triggers a refresh whenever it
	// reports a change, so its changes are usually seen much sooner.
	// Default DefaultRefresh (2s).
	Refresh time.Duration
	// Logger receives refresh failures and namespace creations. Default:
	// discard.
	Logger *slog.Logger
	// OnRefresh, if set, is called after every refresh, once the cache
	// serves its result, with the duration of the store's read and its error
	// (nil on success); the server uses it for store-health metrics.
	OnRefresh func(elapsed time.Duration, err error)
}

// Validate reports the first invalid field of c, wrapped in ErrInvalidConfig.
func (c CacheConfig) Validate() error {
	switch {
	case c.Store == nil:
		return fmt.Errorf("%w: Store is nil", ErrInvalidConfig)
	case c.Refresh < 0:
		return fmt.Errorf("%w: Refresh %v is negative", ErrInvalidConfig, c.Refresh)
	}
	return nil
}

// nsKey addresses a namespace in the cache, by ID or by name, within one
// workspace.
type nsKey struct {
	workspace string
	byID      bool
	value     string
}

// Cache keeps every namespace and override of a [Store] in memory. Reads
// never touch the store except for a namespace the cache has not seen yet.
// Writes go to the store first, then change the cache in place (only the
// namespace written), so a node always sees its own writes at once; other
// nodes see them after their next refresh, which a [Watcher] store triggers
// as soon as it reports the change.
//
// One goroutine, started by NewCache and stopped by Close, owns the refresh
// loop; with a Watcher store it also owns the goroutine that runs Watch. A
// Cache is safe for concurrent use.
type Cache struct {
	cfg        CacheConfig
	namespaces sync.Map // nsKey -> Namespace; namespaces are never deleted
	counts     sync.Map // workspace -> *atomic.Int64, its namespaces in the cache
	indexes    sync.Map // namespace ID -> *overrideIndex, for namespaces with overrides
	// installMu serializes what replaces indexes: a refresh (from its read
	// of the store to its installation) and a write's in-place change. A
	// write changes the cache after its store write returned, so a refresh
	// either read the store after that write or installs before the change.
	installMu sync.Mutex
	// writeMu serializes the writes of one namespace (by hash), from the
	// store write to the cache change, so that two writes of one override
	// reach the cache in the order the store took them.
	writeMu [64]sync.Mutex

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closed    atomic.Bool
}

// NewCache reads the whole store once (and fails if it cannot) and starts the
// refresh loop. Close stops the loop; it does not close the store.
func NewCache(ctx context.Context, cfg CacheConfig) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cache{cfg: cfg, done: make(chan struct{})}
	if err := c.Refresh(ctx); err != nil {
		return nil, err
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.loop(loopCtx)
	return c, nil
}

func (c *Cache) loop(ctx context.Context) {
	defer close(c.done)
	kick := make(chan struct{}, 1)
	if w, ok := c.cfg.Store.(Watcher); ok {
		watched := make(chan struct{})
		defer func() { <-watched }() // Watch returns once ctx is done, as this loop does
		go func() {
			defer close(watched)
			changed := func() {
				select {
				case kick <- struct{}{}:
				default: // a refresh is already due; it will see this change too
				}
			}
			if err := w.Watch(ctx, changed); err != nil && ctx.Err() == nil {
				c.cfg.Logger.Warn("store: watching for changes failed; other nodes' changes are seen on the periodic refresh only", "err", err)
			}
		}()
	}
	t := time.NewTicker(c.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		rctx, cancel := context.WithTimeout(ctx, 2*c.cfg.Refresh+5*time.Second)
		if err := c.Refresh(rctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("store: refresh failed; serving the last good copy", "err", err)
		}
		cancel()
	}
}

// Refresh re-reads the whole store now. It rebuilds the override index of
// each namespace whose overrides changed and keeps the others.
func (c *Cache) Refresh(ctx context.Context) error {
	c.installMu.Lock()
	defer c.installMu.Unlock()
	start := time.Now()
	snap, err := c.cfg.Store.Snapshot(ctx)
	elapsed := time.Since(start)
	if err != nil {
		if c.cfg.OnRefresh != nil {
			c.cfg.OnRefresh(elapsed, err)
		}
		return fmt.Errorf("store: refresh: %w", err)
	}
	for _, ns := range snap.Namespaces {
		c.remember(ns)
	}
	byNS := make(map[string][]Override)
	for _, o := range snap.Overrides {
		byNS[o.NamespaceID] = append(byNS[o.NamespaceID], o)
	}
	for id, os := range byNS {
		if !c.index(id).sameAs(os) {
			c.indexes.Store(id, newOverrideIndex(os))
		}
	}
	c.indexes.Range(func(id, _ any) bool {
		if _, ok := byNS[id.(string)]; !ok {
			c.indexes.Delete(id)
		}
		return true
	})
	if c.cfg.OnRefresh != nil {
		c.cfg.OnRefresh(elapsed, nil)
	}
	return nil
}

// index returns the override index of a namespace, nil if it has none.
func (c *Cache) index(namespaceID string) *overrideIndex {
	if v, ok := c.indexes.Load(namespaceID); ok {
		return v.(*overrideIndex)
	}
	return nil
}

func (c *Cache) remember(ns Namespace) {
	if _, known := c.namespaces.LoadOrStore(nsKey{ns.Workspace, true, ns.ID}, ns); !known {
		n, _ := c.counts.LoadOrStore(ns.Workspace, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	c.namespaces.Store(nsKey{ns.Workspace, false, ns.Name}, ns)
}

// CachedNamespace returns workspace's namespace whose ID or name is
// idOrName if the cache holds it; it never reads the store.
func (c *Cache) CachedNamespace(workspace, idOrName string) (Namespace, bool) {
	return c.cached(workspace, idOrName)
}

// NamespaceCount returns how many namespaces of workspace the cache holds:
// every one the store had at the last refresh, and those created since.
func (c *Cache) NamespaceCount(workspace string) int {
	if n, ok := c.counts.Load(workspace); ok {
		return int(n.(*atomic.Int64).Load())
	}
	return 0
}

func (c *Cache) cached(workspace, idOrName string) (Namespace, bool) {
	if v, ok := c.namespaces.Load(nsKey{workspace, true, idOrName}); ok {
		return v.(Namespace), true
	}
	if v, ok := c.namespaces.Load(nsKey{workspace, false, idOrName}); ok {
		return v.(Namespace), true
	}
	return Namespace{}, false
}

// Namespace returns workspace's namespace whose ID or name is idOrName, from
// memory or else from the store; ErrNotFound if it does not exist.
func (c *Cache) Namespace(ctx context.Context, workspace, idOrName string) (Namespace, error) {
	if c.closed.Load() {
		return Namespace{}, ErrClosed
	}
	if ns, ok := c.cached(workspace, idOrName); ok {
		return ns, nil
	}
	ns, err := c.cfg.Store.Namespace(ctx, workspace, idOrName)
	if err != nil {
		return Namespace{}, err
	}
	c.remember(ns)
	return ns, nil
}

// EnsureNamespace is Namespace, but creates a namespace called idOrName when
// none has that ID or name.
func (c *Cache) EnsureNamespace(ctx context.Context, workspace, idOrName string) (Namespace, error) {
	ns, err := c.Namespace(ctx, workspace, idOrName)
	if !errors.Is(err, ErrNotFound) {
		return ns, err
	}
	ns, err = c.cfg.Store.EnsureNamespace(ctx, workspace, idOrName)
	if err != nil {
		return Namespace{}, err
	}
	c.cfg.Logger.Info("namespace created", "workspace", ns.Workspace, "name", ns.Name, "id", ns.ID)
	c.remember(ns)
	return ns, nil
}

// Match returns the override of the namespace that applies to identifier:
// the exact one if any, else the most specific matching pattern (see
// [MoreSpecific]). Its cost grows with the identifier's length, not with the
// patterns that lack one of the identifier's pieces (literal prefix, suffix
// or run); see docs/architecture.md.
func (c *Cache) Match(namespaceID, identifier string) (Override, bool) {
	return c.index(namespaceID).lookup(identifier)
}

// SetOverride stores o (see [Store.SetOverride]) and sets it in the cache.
func (c *Cache) SetOverride(ctx context.Context, o Override) (Override, error) {
	if c.closed.Load() {
		return Override{}, ErrClosed
	}
	unlock := c.lockWrites(o.NamespaceID)
	defer unlock()
	stored, err := c.cfg.Store.SetOverride(ctx, o)
	if err != nil {
		return Override{}, err
	}
	c.change(stored.NamespaceID, func(ix *overrideIndex) *overrideIndex { return ix.with(stored) })
	return stored, nil
}

// DeleteOverride deletes an override (see [Store.DeleteOverride]) and
// removes it from the cache. When the store has none, a copy the cache
// still holds (deleted through another node) is removed too.
func (c *Cache) DeleteOverride(ctx context.Context, workspace, namespaceID, identifier string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	unlock := c.lockWrites(namespaceID)
	defer unlock()
	err := c.cfg.Store.DeleteOverride(ctx, workspace, namespaceID, identifier)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	c.change(namespaceID, func(ix *overrideIndex) *overrideIndex {
		if o, ok := ix.get(identifier); !ok || o.Workspace != workspace {
			return ix
		}
		next, _ := ix.without(identifier)
		return next
	})
	return err
}

// lockWrites locks the writes of namespaceID and returns the unlock.
func (c *Cache) lockWrites(namespaceID string) func() {
	h := fnv.New32a()
	_, _ = io.WriteString(h, namespaceID)
	mu := &c.writeMu[h.Sum32()%uint32(len(c.writeMu))]
	mu.Lock()
	return mu.Unlock
}

// change replaces the override index of a namespace by f of it.
func (c *Cache) change(namespaceID string, f func(*overrideIndex) *overrideIndex) {
	c.installMu.Lock()
	defer c.installMu.Unlock()
	cur := c.index(namespaceID)
	next := f(cur)
	switch {
	case next == cur:
	case next.len() == 0:
		c.indexes.Delete(namespaceID)
	default:
		c.indexes.Store(namespaceID, next)
	}
}

// Store returns the store behind the cache, for reads that must see the
// durable state (getOverride, listOverrides).
func (c *Cache) Store() Store { return c.cfg.Store }

// Close stops the refresh loop and waits for it. It is idempotent and does
// not close the store.
func (c *Cache) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.cancel()
		<-c.done
	})
	return nil
}
