package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/storetest"
)

// memStore is a store.Store in memory, so that the API's tests need no
// database. Until release is closed (if set), EnsureNamespace blocks, as a
// slow store would. It holds at most maxOverrides overrides per namespace.
type memStore struct {
	release      chan struct{}
	maxOverrides int

	mu         sync.Mutex
	namespaces []store.Namespace
	overrides  map[string]store.Override // by namespace ID + "\x00" + identifier
	counts     map[string]int            // overrides by namespace ID
	closed     bool
}

func newMemStore() *memStore {
	return &memStore{overrides: make(map[string]store.Override), counts: make(map[string]int), maxOverrides: store.DefaultMaxOverrides}
}

func (m *memStore) lock() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return store.ErrClosed
	}
	return nil
}

func (m *memStore) find(workspace, idOrName string) (store.Namespace, bool) {
	for _, byID := range []bool{true, false} {
		for _, ns := range m.namespaces {
			if ns.Workspace == workspace && (byID && ns.ID == idOrName || !byID && ns.Name == idOrName) {
				return ns, true
			}
		}
	}
	return store.Namespace{}, false
}

func (m *memStore) EnsureNamespace(ctx context.Context, workspace, name string) (store.Namespace, error) {
	if m.release != nil {
		select {
		case <-m.release:
		case <-ctx.Done():
			return store.Namespace{}, ctx.Err()
		}
	}
	if err := m.lock(); err != nil {
		return store.Namespace{}, err
	}
	defer m.mu.Unlock()
	for _, ns := range m.namespaces {
		if ns.Workspace == workspace && ns.Name == name {
			return ns, nil
		}
	}
	ns := store.Namespace{ID: store.NewID(store.NamespaceIDPrefix), Workspace: workspace, Name: name, CreatedAt: time.Now()}
	m.namespaces = append(m.namespaces, ns)
	return ns, nil
}

func (m *memStore) Namespace(_ context.Context, workspace, idOrName string) (store.Namespace, error) {
	if err := m.lock(); err != nil {
		return store.Namespace{}, err
	}
	defer m.mu.Unlock()
	if ns, ok := m.find(workspace, idOrName); ok {
		return ns, nil
	}
	return store.Namespace{}, fmt.Errorf("namespace %q: %w", idOrName, store.ErrNotFound)
}

// owned reports whether namespaceID is a namespace of workspace.
func (m *memStore) owned(workspace, namespaceID string) bool {
	ns, ok := m.find(workspace, namespaceID)
	return ok && ns.ID == namespaceID
}

func (m *memStore) SetOverride(_ context.Context, o store.Override) (store.Override, error) {
	if err := m.lock(); err != nil {
		return store.Override{}, err
	}
	defer m.mu.Unlock()
	if !m.owned(o.Workspace, o.NamespaceID) {
		return store.Override{}, fmt.Errorf("namespace %q: %w", o.NamespaceID, store.ErrNotFound)
	}
	k := o.NamespaceID + "\x00" + o.Identifier
	now := time.Now()
	o.ID, o.CreatedAt, o.UpdatedAt = store.NewID(store.OverrideIDPrefix), now, now
	if old, ok := m.overrides[k]; ok {
		o.ID, o.CreatedAt = old.ID, old.CreatedAt
	} else if m.counts[o.NamespaceID] >= m.maxOverrides {
		return store.Override{}, fmt.Errorf("memstore: %w", &store.LimitError{Bound: store.BoundOverrides, Max: m.maxOverrides})
	} else {
		m.counts[o.NamespaceID]++
	}
	m.overrides[k] = o
	return o, nil
}

func (m *memStore) Override(_ context.Context, workspace, namespaceID, identifier string) (store.Override, error) {
	if err := m.lock(); err != nil {
		return store.Override{}, err
	}
	defer m.mu.Unlock()
	o, ok := m.overrides[namespaceID+"\x00"+identifier]
	if !ok || o.Workspace != workspace {
		return store.Override{}, fmt.Errorf("override %q: %w", identifier, store.ErrNotFound)
	}
	return o, nil
}

func (m *memStore) ListOverrides(_ context.Context, workspace, namespaceID, after string, limit int) ([]store.Override, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []store.Override
	for _, o := range m.overrides {
		if o.Workspace == workspace && o.NamespaceID == namespaceID && o.Identifier > after {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b store.Override) int { return cmp.Compare(a.Identifier, b.Identifier) })
	return out[:min(limit, len(out))], nil
}

func (m *memStore) DeleteOverride(_ context.Context, workspace, namespaceID, identifier string) error {
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	k := namespaceID + "\x00" + identifier
	if o, ok := m.overrides[k]; !ok || o.Workspace != workspace {
		return fmt.Errorf("override %q: %w", identifier, store.ErrNotFound)
	}
	delete(m.overrides, k)
	m.counts[namespaceID]--
	return nil
}

func (m *memStore) Snapshot(context.Context) (store.Snapshot, error) {
	if err := m.lock(); err != nil {
		return store.Snapshot{}, err
	}
	defer m.mu.Unlock()
	snap := store.Snapshot{Namespaces: slices.Clone(m.namespaces)}
	for _, o := range m.overrides {
		snap.Overrides = append(snap.Overrides, o)
	}
	return snap, nil
}

func (m *memStore) Ping(context.Context) error {
	if err := m.lock(); err != nil {
		return err
	}
	m.mu.Unlock()
	return nil
}

func (m *memStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// TestMemStore runs the store conformance suite against the tests' store.
func TestMemStore(t *testing.T) {
	storetest.Run(t, newMemStore(), "ws")
	capped := newMemStore()
	capped.maxOverrides = 3
	storetest.RunCap(t, capped, "ws", 3)
}
