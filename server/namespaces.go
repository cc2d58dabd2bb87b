package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/store"
)

// DefaultMaxNamespaces is the default cap on the namespaces of one
// workspace (Config.MaxNamespaces). Namespaces are created on first use and
// never deleted, so the cap keeps a client from growing the store and every
// node's memory without bound.
const DefaultMaxNamespaces = 10_000

const (
	// namespaceWait is how long a limit call waits for the creation of its
	// namespace before deciding without it. A namespace that does not exist
	// yet has no overrides, so the decision is the same; only a slow store
	// makes the wait expire.
	namespaceWait = 50 * time.Millisecond
	// createTimeout bounds the creation of one namespace in the store.
	createTimeout = 30 * time.Second
)

// namespaces creates the namespaces that calls use for the first time, in
// the background and at most once at a time per name, and enforces the cap
// per workspace. A limit call, multiLimit included, never waits on the
// store for longer than namespaceWait in all.
type namespaces struct {
	catalog Catalog
	max     int
	log     *slog.Logger
	wg      sync.WaitGroup

	mu      sync.Mutex
	pending map[namespaceKey]*creation
	counts  map[string]int // creations pending per workspace
}

type namespaceKey struct{ workspace, name string }

// creation is the creation of one namespace; done is closed when it ends.
type creation struct {
	done chan struct{}
	ns   store.Namespace
	err  error
}

func newNamespaces(catalog Catalog, maxPerWorkspace int, log *slog.Logger) *namespaces {
	return &namespaces{
		catalog: catalog,
		max:     maxPerWorkspace,
		log:     log,
		pending: make(map[namespaceKey]*creation),
		counts:  make(map[string]int),
	}
}

// forLimit returns the namespace of a check of a limit call. When it is
// not in memory its creation starts and forLimit waits for it until
// *until, which the call's first wait sets to namespaceWait from then: the
// checks of one call share one wait, however many they are. ok is false if
// the creation did not end in time or failed: the check is then decided
// without overrides under the name it gave. The error is the cap (403) or
// a shutdown (503).
func (n *namespaces) forLimit(ctx context.Context, until *time.Time, workspace, name string) (ns store.Namespace, ok bool, e *apiError) {
	if ns, ok := n.catalog.CachedNamespace(workspace, name); ok {
		return ns, true, nil
	}
	cr, e := n.start(workspace, name)
	if e != nil {
		return ns, false, e
	}
	if until.IsZero() {
		*until = time.Now().Add(namespaceWait)
	}
	t := time.NewTimer(max(0, time.Until(*until)))
	defer t.Stop()
	select {
	case <-cr.done:
		switch {
		case errors.Is(cr.err, store.ErrClosed):
			return ns, false, shuttingDown()
		case errors.Is(cr.err, store.ErrLimitReached):
			return ns, false, storeError(cr.err, nil)
		}
		return cr.ns, cr.err == nil, nil
	case <-t.C:
	case <-ctx.Done():
	}
	return ns, false, nil
}

// ensure returns the namespace called name, creating it if needed, and
// waits for the creation as long as ctx allows (setOverride).
func (n *namespaces) ensure(ctx context.Context, workspace, name string) (store.Namespace, *apiError) {
	if ns, ok := n.catalog.CachedNamespace(workspace, name); ok {
		return ns, nil
	}
	cr, e := n.start(workspace, name)
	if e != nil {
		return store.Namespace{}, e
	}
	select {
	case <-cr.done:
		if cr.err != nil {
			return store.Namespace{}, storeError(cr.err, namespaceNotFound(name))
		}
		return cr.ns, nil
	case <-ctx.Done():
		return store.Namespace{}, unavailable("The namespace store did not answer in time; retry later.", context.Cause(ctx))
	}
}

// start returns the creation of (workspace, name) in flight, starting it
// unless the workspace has reached its cap.
func (n *namespaces) start(workspace, name string) (*creation, *apiError) {
	k := namespaceKey{workspace, name}
	n.mu.Lock()
	defer n.mu.Unlock()
	if cr := n.pending[k]; cr != nil {
		return cr, nil
	}
	if n.catalog.NamespaceCount(workspace)+n.counts[workspace] >= n.max {
		return nil, namespaceLimit(n.max)
	}
	cr := &creation{done: make(chan struct{})}
	n.pending[k] = cr
	n.counts[workspace]++
	n.wg.Add(1)
	go n.create(k, cr)
	return cr, nil
}

// create creates the namespace of k in the store, then ends cr.
func (n *namespaces) create(k namespaceKey, cr *creation) {
	defer n.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	cr.ns, cr.err = n.catalog.EnsureNamespace(ctx, k.workspace, k.name)
	if cr.err != nil && !errors.Is(cr.err, store.ErrClosed) && !errors.Is(cr.err, store.ErrLimitReached) {
		n.log.Warn("server: creating a namespace failed; its calls are decided without overrides until it exists", "workspace", k.workspace, "namespace", k.name, "err", cr.err)
	}
	n.mu.Lock()
	delete(n.pending, k)
	if n.counts[k.workspace]--; n.counts[k.workspace] == 0 {
		delete(n.counts, k.workspace)
	}
	n.mu.Unlock()
	close(cr.done)
}

// wait waits for the creations in flight.
func (n *namespaces) wait() { n.wg.Wait() }

func namespaceLimit(maxPerWorkspace int) *apiError {
	e := newError(http.StatusForbidden, TypeStoreLimit, "This workspace has "+strconv.Itoa(maxPerWorkspace)+" namespaces, as many as it may have; use an existing namespace.")
	e.Errors = []FieldError{{Location: "body.namespace", Message: "would create a namespace beyond the workspace's limit of " + strconv.Itoa(maxPerWorkspace), Fix: "Use an existing namespace, or raise --max-namespaces."}}
	return e
}

func shuttingDown() *apiError {
	return unavailable("The server is shutting down.", nil)
}
