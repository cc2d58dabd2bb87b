package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store/sqlite"
)

// TestCacheCountsNamespaces checks CachedNamespace (memory only) and
// NamespaceCount: a namespace created through another cache is neither
// cached nor counted here until a refresh, and a refresh that sees a
// namespace again does not count it twice.
func TestCacheCountsNamespaces(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := newCache(t, s, time.Hour)
	b := newCache(t, s, time.Hour)
	for _, name := range []string{"api", "web", "api"} {
		if _, err := a.EnsureNamespace(ctx, "ws", name); err != nil {
			t.Fatal(err)
		}
	}
	ns, ok := a.CachedNamespace("ws", "api")
	if !ok || a.NamespaceCount("ws") != 2 || a.NamespaceCount("other") != 0 {
		t.Fatalf("CachedNamespace = %v, NamespaceCount = %d, want the namespace and 2", ok, a.NamespaceCount("ws"))
	}
	if got, ok := a.CachedNamespace("ws", ns.ID); !ok || got.Name != "api" {
		t.Fatalf("by id: %+v, %v", got, ok)
	}
	if _, ok := b.CachedNamespace("ws", "api"); ok || b.NamespaceCount("ws") != 0 {
		t.Fatalf("the other cache holds the namespace before its refresh (count %d)", b.NamespaceCount("ws"))
	}
	for range 2 {
		if err := b.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := b.CachedNamespace("ws", "web"); !ok || b.NamespaceCount("ws") != 2 {
		t.Fatalf("after refreshes: count %d, want 2", b.NamespaceCount("ws"))
	}
}
