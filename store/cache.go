package store

import (
	"context"
	"errors"
	"fmt"
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
// Writes go to the store first, then the cache re-reads it, so a node always
// sees its own writes; other nodes see them after their next refresh, which
// a [Watcher] store triggers as soon as it reports the change.
//
// One goroutine, started by NewCache and stopped by Close, owns the refresh
// loop; with a Watcher store it also owns the goroutine that runs Watch. A
// Cache is safe for concurrent use.
type Cache struct {
	cfg        CacheConfig
	namespaces sync.Map // nsKey -> Namespace; namespaces are never deleted
	counts     sync.Map // workspace -> *atomic.Int64, its namespaces in the cache
	overrides  atomic.Pointer[map[string]*overrideIndex]
	reloadMu   sync.Mutex // serializes reloads so a newer read is never replaced by an older one

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
	empty := map[string]*overrideIndex{}
	c.overrides.Store(&empty)
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

// Refresh re-reads the whole store now.
func (c *Cache) Refresh(ctx context.Context) error {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
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
	idx := make(map[string]*overrideIndex, len(byNS))
	for id, os := range byNS {
		idx[id] = newOverrideIndex(os)
	}
	c.overrides.Store(&idx)
	if c.cfg.OnRefresh != nil {
		c.cfg.OnRefresh(elapsed, nil)
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
// [MoreSpecific]).
func (c *Cache) Match(namespaceID, identifier string) (Override, bool) {
	ix := (*c.overrides.Load())[namespaceID]
	if ix == nil {
		return Override{}, false
	}
	return ix.lookup(identifier)
}

// SetOverride stores o (see [Store.SetOverride]) and refreshes the cache.
// Only a failed write is an error.
func (c *Cache) SetOverride(ctx context.Context, o Override) (Override, error) {
	if c.closed.Load() {
		return Override{}, ErrClosed
	}
	stored, err := c.cfg.Store.SetOverride(ctx, o)
	if err != nil {
		return Override{}, err
	}
	c.refreshAfterWrite(ctx)
	return stored, nil
}

// refreshAfterWrite re-reads the store after a successful write. A failure
// is only logged: the write is durable and the refresh loop retries.
func (c *Cache) refreshAfterWrite(ctx context.Context) {
	if err := c.Refresh(ctx); err != nil {
		c.cfg.Logger.Warn("store: refresh after a write failed; the loop will retry", "err", err)
	}
}

// DeleteOverride deletes an override (see [Store.DeleteOverride]) and
// refreshes the cache.
func (c *Cache) DeleteOverride(ctx context.Context, workspace, namespaceID, identifier string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := c.cfg.Store.DeleteOverride(ctx, workspace, namespaceID, identifier); err != nil {
		return err
	}
	c.refreshAfterWrite(ctx)
	return nil
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
