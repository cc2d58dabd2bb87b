package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newCache(t *testing.T, s store.Store, refresh time.Duration) *store.Cache {
	t.Helper()
	c, err := store.NewCache(context.Background(), store.CacheConfig{Store: s, Refresh: refresh})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openSQLite opens a SQLite store in a temporary folder, closed at cleanup.
func openSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestCachePrecedence(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	c := newCache(t, s, time.Hour)
	ns, err := c.EnsureNamespace(ctx, "ws", "api")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, p := range []string{"*", "user_*", "user_1", "*_1", "user_1*"} {
		o, err := c.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: p, Limit: 1, Duration: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ids[p] = o.ID
	}
	for _, tc := range []struct{ name, id, want string }{
		{"exact wins", "user_1", "user_1"},
		{"longest literal", "user_12", "user_1*"},
		{"prefix over suffix by literal length", "user_21", "user_*"},
		{"suffix", "bob_1", "*_1"},
		{"catch-all", "zzz", "*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, ok := c.Match(ns.ID, tc.id)
			if !ok || o.ID != ids[tc.want] {
				t.Fatalf("Match(%q) = %q (%v), want %q", tc.id, o.Identifier, ok, tc.want)
			}
		})
	}
	if _, ok := c.Match("rlns_unknown", "user_1"); ok {
		t.Fatal("override matched in an unknown namespace")
	}
}

// TestCacheSeesOtherNodes has two caches (two nodes) over one store: a
// write through one becomes visible through the other after its refresh.
func TestCacheSeesOtherNodes(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	a := newCache(t, s, time.Hour)
	b := newCache(t, s, 50*time.Millisecond)
	ns, err := a.EnsureNamespace(ctx, "ws", "api")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: "x", Limit: 9, Duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if o, ok := b.Match(ns.ID, "x"); ok && o.Limit == 9 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other cache never saw the override")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, err := b.Namespace(ctx, "ws", ns.ID); err != nil || got.Name != "api" {
		t.Fatalf("namespace by id through the other cache: %+v, %v", got, err)
	}
	if _, err := b.Namespace(ctx, "other", "api"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("other workspace: %v", err)
	}
}

func TestCacheClose(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	c, err := store.NewCache(ctx, store.CacheConfig{Store: s, Refresh: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.EnsureNamespace(ctx, "ws", "api"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestCacheConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  store.CacheConfig
	}{
		{"nil store", store.CacheConfig{}},
		{"negative refresh", store.CacheConfig{Store: (*sqlite.Store)(nil), Refresh: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); !errors.Is(err, store.ErrInvalidConfig) {
				t.Fatalf("Validate() = %v", err)
			}
		})
	}
}

// watchedStore is a store whose Watch reports a change whenever the test
// sends on kick.
type watchedStore struct {
	*sqlite.Store
	kick    chan struct{}
	watched chan struct{} // closed when Watch has started
}

func (w *watchedStore) Watch(ctx context.Context, changed func()) error {
	close(w.watched)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.kick:
			changed()
		}
	}
}

// TestCacheRefreshesWhenTheStoreReportsAChange: with a refresh period of an
// hour, a change written behind the cache's back (another node) is seen as
// soon as the store's Watch reports it, and Close stops Watch (goleak).
func TestCacheRefreshesWhenTheStoreReportsAChange(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	w := &watchedStore{Store: s, kick: make(chan struct{}), watched: make(chan struct{})}
	refreshed := make(chan struct{}, 16)
	c, err := store.NewCache(ctx, store.CacheConfig{Store: w, Refresh: time.Hour, OnRefresh: func(time.Duration, error) { refreshed <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-refreshed // NewCache's own read
	<-w.watched
	ns, err := s.EnsureNamespace(ctx, "ws", "api")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: "x", Limit: 3, Duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Match(ns.ID, "x"); ok {
		t.Fatal("the cache saw the write before any refresh")
	}
	w.kick <- struct{}{}
	select {
	case <-refreshed:
	case <-time.After(5 * time.Second):
		t.Fatal("a reported change did not refresh the cache")
	}
	if o, ok := c.Match(ns.ID, "x"); !ok || o.Limit != 3 {
		t.Fatalf("after the reported change: %+v, %v", o, ok)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
