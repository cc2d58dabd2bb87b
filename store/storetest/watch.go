package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
)

// Watch runs w.Watch until the test ends and returns a channel that
// receives a value per changed call (calls beyond its buffer of 64 are
// dropped). At cleanup it cancels Watch, waits for it and fails the test
// if it returned an error.
func Watch(t testing.TB, w store.Watcher) <-chan struct{} {
	t.Helper()
	ch := make(chan struct{}, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Watch(ctx, func() {
			select {
			case ch <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch returned %v after its context was cancelled", err)
		}
	})
	return ch
}

// WaitChanged fails t unless a change is reported on ch within d; what
// names the change in the failure.
func WaitChanged(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("no change reported within %v: %s", d, what)
	}
}

// Drain empties ch of the reports received so far.
func Drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// RunCachePropagation runs a store.Cache over each of a and b, two stores
// of one shared backend (two nodes), with the periodic refresh set to an
// hour so that only a and b's change reports count. A write through one
// cache is seen by the writer at once and by the other within 5 s: a new
// override, a replaced one, and a delete that lets a less specific pattern
// apply again. workspace must be unique to this run.
func RunCachePropagation(t *testing.T, a, b store.Store, workspace string) {
	ctx := context.Background()
	caches := [2]*store.Cache{}
	for i, s := range []store.Store{a, b} {
		c, err := store.NewCache(ctx, store.CacheConfig{Store: s, Refresh: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		caches[i] = c
	}
	ns, err := caches[0].EnsureNamespace(ctx, workspace, "propagation")
	if err != nil {
		t.Fatal(err)
	}
	set := func(c *store.Cache, id string, limit int64) func() error {
		return func() error {
			_, err := c.SetOverride(ctx, store.Override{Workspace: workspace, NamespaceID: ns.ID, Identifier: id, Limit: limit, Duration: time.Second})
			return err
		}
	}
	for _, tc := range []struct {
		name      string
		writer    int
		op        func() error
		id        string
		wantLimit int64 // 0: no override applies
	}{
		{"a pattern", 0, set(caches[0], "user_*", 1), "user_7", 1},
		{"a more specific pattern", 1, set(caches[1], "user_7*", 2), "user_7", 2},
		{"an exact override", 0, set(caches[0], "user_7", 3), "user_7", 3},
		{"a replaced override", 1, set(caches[1], "user_7", 4), "user_7", 4},
		{"a delete lets the pattern apply", 0, func() error { return caches[0].DeleteOverride(ctx, workspace, ns.ID, "user_7") }, "user_7", 2},
		{"the last delete", 1, func() error { return caches[1].DeleteOverride(ctx, workspace, ns.ID, "user_7*") }, "user_7", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.op(); err != nil {
				t.Fatal(err)
			}
			if o, ok := caches[tc.writer].Match(ns.ID, tc.id); ok != (tc.wantLimit != 0) || o.Limit != tc.wantLimit {
				t.Fatalf("the writer's cache answers limit %d (%v), want %d at once", o.Limit, ok, tc.wantLimit)
			}
			other := caches[1-tc.writer]
			deadline := time.Now().Add(5 * time.Second)
			for {
				o, ok := other.Match(ns.ID, tc.id)
				if ok == (tc.wantLimit != 0) && o.Limit == tc.wantLimit {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 5 s the other cache answers limit %d (%v), want %d", o.Limit, ok, tc.wantLimit)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
