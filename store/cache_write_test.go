package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/sqlite"
)

// countingStore counts the snapshots read from the store it wraps.
type countingStore struct {
	store.Store
	snapshots atomic.Int64
}

func (s *countingStore) Snapshot(ctx context.Context) (store.Snapshot, error) {
	s.snapshots.Add(1)
	return s.Store.Snapshot(ctx)
}

// TestCacheWritesInPlace: writes change the cache without reading the
// whole store again, and the node sees each of its writes at once.
func TestCacheWritesInPlace(t *testing.T) {
	ctx := context.Background()
	s := &countingStore{Store: openSQLite(t)}
	c := newCache(t, s, time.Hour)
	ns, err := c.EnsureNamespace(ctx, "ws", "api")
	if err != nil {
		t.Fatal(err)
	}
	set := func(id string, limit int64) {
		t.Helper()
		if _, err := c.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: id, Limit: limit, Duration: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		op        func()
		id        string
		wantLimit int64 // 0: no override applies
	}{
		{"exact set", func() { set("user_1", 1) }, "user_1", 1},
		{"pattern set", func() { set("user_*", 2) }, "user_2", 2},
		{"exact replaced", func() { set("user_1", 3) }, "user_1", 3},
		{"pattern replaced", func() { set("user_*", 4) }, "user_9", 4},
		{"exact deleted: the pattern applies", func() {
			if err := c.DeleteOverride(ctx, "ws", ns.ID, "user_1"); err != nil {
				t.Fatal(err)
			}
		}, "user_1", 4},
		{"pattern deleted", func() {
			if err := c.DeleteOverride(ctx, "ws", ns.ID, "user_*"); err != nil {
				t.Fatal(err)
			}
		}, "user_1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.op()
			o, ok := c.Match(ns.ID, tc.id)
			if ok != (tc.wantLimit != 0) || o.Limit != tc.wantLimit {
				t.Fatalf("Match(%q) = limit %d (%v), want %d", tc.id, o.Limit, ok, tc.wantLimit)
			}
		})
	}
	if n := s.snapshots.Load(); n != 1 {
		t.Fatalf("the store was read whole %d times, want once (by NewCache)", n)
	}
}

// TestCacheDeleteDropsAStaleCopy: a delete the store answers with
// ErrNotFound (another node deleted the override) also removes the copy
// this cache still holds, but only when it is the caller's workspace's.
func TestCacheDeleteDropsAStaleCopy(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	a := newCache(t, s, time.Hour)
	b := newCache(t, s, time.Hour)
	ns, err := a.EnsureNamespace(ctx, "ws", "api")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: "x", Limit: 1, Duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteOverride(ctx, "ws", ns.ID, "x"); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteOverride(ctx, "other", ns.ID, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete from another workspace: %v", err)
	}
	if _, ok := b.Match(ns.ID, "x"); !ok {
		t.Fatal("another workspace's delete removed the cached copy")
	}
	if err := b.DeleteOverride(ctx, "ws", ns.ID, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, ok := b.Match(ns.ID, "x"); ok {
		t.Fatal("the stale copy outlived a delete the store answered with ErrNotFound")
	}
}

// TestCacheConcurrentWrites races writers of the same identifiers against
// each other and against refreshes and lookups: once they are done, the
// cache holds exactly what the store holds.
func TestCacheConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	c := newCache(t, s, time.Millisecond)
	ns, err := c.EnsureNamespace(ctx, "ws", "api")
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "a*", "*b", "*"}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := range 40 {
				id := ids[(w+i)%len(ids)]
				if (w+i)%3 == 0 {
					if err := c.DeleteOverride(ctx, "ws", ns.ID, id); err != nil && !errors.Is(err, store.ErrNotFound) {
						t.Error(err)
					}
					continue
				}
				if _, err := c.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: id, Limit: int64(w*100 + i + 1), Duration: time.Second}); err != nil {
					t.Error(err)
				}
				c.Match(ns.ID, "ab")
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		want, err := s.Override(ctx, "ws", ns.ID, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		got, ok := c.Match(ns.ID, id)
		if err == nil && (!ok || got.Identifier != id || got.Limit != want.Limit) {
			t.Fatalf("%q: the cache has %+v (%v), the store %+v", id, got, ok, want)
		}
	}
}

// fixedStore is a store whose Snapshot returns snap.
type fixedStore struct {
	store.Store
	snap store.Snapshot
}

func (s *fixedStore) Snapshot(context.Context) (store.Snapshot, error) { return s.snap, nil }

// TestCacheMatchCostAdversarial puts 10,000 wildcard overrides built
// against a linear scan in one namespace: 200 lookups of a 512-byte
// identifier that none matches take well under a second (a linear scan
// with a backtracking glob took about 0.5 s per lookup).
func TestCacheMatchCostAdversarial(t *testing.T) {
	a := strings.Repeat("a", 250)
	for _, tc := range []struct {
		name    string
		pattern func(i int) string
	}{
		{"suffix", func(i int) string { return "*" + a + fmt.Sprintf("b%05d", i) }},
		{"prefix", func(i int) string { return a + fmt.Sprintf("b%05d", i) + "*" }},
		{"infix", func(i int) string { return "*" + a + fmt.Sprintf("b%05d", i) + "*" }},
		{"ends", func(i int) string { return "a*" + a + fmt.Sprintf("b%05d", i) + "*a" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := store.Namespace{ID: "rlns_1", Workspace: "ws", Name: "api"}
			s := &fixedStore{Store: openSQLite(t), snap: store.Snapshot{Namespaces: []store.Namespace{ns}}}
			for i := range 10_000 {
				s.snap.Overrides = append(s.snap.Overrides, store.Override{ID: fmt.Sprint(i), Workspace: "ws", NamespaceID: ns.ID, Identifier: tc.pattern(i), Limit: 1, Duration: time.Second})
			}
			c := newCache(t, s, time.Hour)
			id := strings.Repeat("a", 512)
			start := time.Now()
			for range 200 {
				if o, ok := c.Match(ns.ID, id); ok {
					t.Fatalf("%q matched", o.Identifier)
				}
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("200 lookups took %v", d)
			}
		})
	}
}

// writeOverrides writes n new overrides (every fourth a pattern) into one
// namespace through c, the first numbered from, and returns how long that
// took.
func writeOverrides(tb testing.TB, c *store.Cache, from, n int) time.Duration {
	tb.Helper()
	ctx := context.Background()
	ns, err := c.EnsureNamespace(ctx, "ws", "api")
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	for i := from; i < from+n; i++ {
		id := fmt.Sprintf("user_%05d", i)
		if i%4 == 0 {
			id += "*"
		}
		if _, err := c.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: id, Limit: 1, Duration: time.Second}); err != nil {
			tb.Fatal(err)
		}
	}
	return time.Since(start)
}

// TestThousandWritesOnSQLite: 1,000 setOverride through a cache over
// SQLite read no snapshot of the store (a write that re-read and
// re-indexed every override made writes quadratic), and each is seen by
// the node at once. How long they take is logged, not asserted:
// BenchmarkThousandWritesOnSQLite measures it.
func TestThousandWritesOnSQLite(t *testing.T) {
	s := &countingStore{Store: openSQLite(t)}
	c := newCache(t, s, time.Hour)
	before := s.snapshots.Load()
	d := writeOverrides(t, c, 0, 1000)
	t.Logf("1,000 writes took %v", d)
	if n := s.snapshots.Load() - before; n != 0 {
		t.Fatalf("1,000 writes read %d snapshots of the store, want 0", n)
	}
	ns, err := c.EnsureNamespace(context.Background(), "ws", "api")
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 999} {
		id := fmt.Sprintf("user_%05d", i)
		if o, ok := c.Match(ns.ID, id); !ok || o.Identifier != id {
			t.Fatalf("Match(%q) = %+v, %v after the writes", id, o, ok)
		}
	}
}

// BenchmarkThousandWritesOnSQLite measures 1,000 setOverride through a
// cache over SQLite into one namespace, each a new override, into an empty
// namespace and into one that already holds 9,000 (written beforehand,
// not timed):
//
//	go test -run '^$' -bench ThousandWritesOnSQLite -benchtime 3x ./store
func BenchmarkThousandWritesOnSQLite(b *testing.B) {
	for _, held := range []int{0, 9000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				s, err := sqlite.Open(context.Background(), sqlite.Config{Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				c, err := store.NewCache(context.Background(), store.CacheConfig{Store: s, Refresh: time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				writeOverrides(b, c, 0, held)
				b.StartTimer()
				writeOverrides(b, c, held, 1000)
				b.StopTimer()
				c.Close()
				s.Close()
			}
		})
	}
}
