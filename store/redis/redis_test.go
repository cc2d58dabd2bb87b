package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
	"github.com/sluicehq/sluice/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var prefixSeq atomic.Int64

// newPrefix returns a key prefix no other test run uses.
func newPrefix() string {
	return fmt.Sprintf("sluicetest-%d-%d", time.Now().UnixNano(), prefixSeq.Add(1))
}

// deleteUnder deletes every key of c that starts with prefix.
func deleteUnder(ctx context.Context, c *goredis.Client, prefix string) error {
	iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
	return iter.Err()
}

// uniquePrefix returns a new prefix whose keys on the Redis at addr are
// deleted at cleanup.
func uniquePrefix(t *testing.T, addr string) string {
	t.Helper()
	prefix := newPrefix()
	t.Cleanup(func() {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		defer c.Close()
		if err := deleteUnder(context.Background(), c, prefix); err != nil {
			t.Errorf("cleanup of %s: %v", prefix, err)
		}
	})
	return prefix
}

// open returns a store on addr (the real Redis or a proxy in front of it)
// with its own client, closed at cleanup.
func open(t *testing.T, addr, prefix string, cfg redis.Config) *redis.Store {
	t.Helper()
	client := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	cfg.Client, cfg.KeyPrefix = client, prefix
	s, err := redis.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	addr := testenv.RedisAddr(t)
	s := open(t, addr, uniquePrefix(t, addr), redis.Config{})
	storetest.Run(t, s, "ws-redis")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Namespace(context.Background(), "ws-redis", "api"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestCap runs the conformance suite's test of the bound on overrides.
func TestCap(t *testing.T) {
	addr := testenv.RedisAddr(t)
	s := open(t, addr, uniquePrefix(t, addr), redis.Config{MaxOverrides: 3})
	storetest.RunCap(t, s, "ws-redis-cap", 3)
}

// TestAwkwardWorkspaces stores data in workspaces whose names look like
// key syntax (braces, colons, length prefixes): none sees another's data.
func TestAwkwardWorkspaces(t *testing.T) {
	addr := testenv.RedisAddr(t)
	s := open(t, addr, uniquePrefix(t, addr), redis.Config{})
	ctx := context.Background()
	wss := []string{"", "a", "a}", "{a}", "1:a", "a:1", "a:ns", "}{", "a b"}
	ids := map[string]string{}
	for _, ws := range wss {
		ns, err := s.EnsureNamespace(ctx, ws, "api")
		if err != nil {
			t.Fatalf("workspace %q: %v", ws, err)
		}
		ids[ws] = ns.ID
		if _, err := s.SetOverride(ctx, store.Override{Workspace: ws, NamespaceID: ns.ID, Identifier: "x", Limit: int64(len(ws)), Duration: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Namespaces) != len(wss) || len(snap.Overrides) != len(wss) {
		t.Fatalf("snapshot has %d namespaces and %d overrides, want %d each", len(snap.Namespaces), len(snap.Overrides), len(wss))
	}
	for _, o := range snap.Overrides {
		if o.NamespaceID != ids[o.Workspace] || o.Limit != int64(len(o.Workspace)) {
			t.Fatalf("override %+v is not its workspace's", o)
		}
	}
	for _, ws := range wss {
		got, err := s.Namespace(ctx, ws, "api")
		if err != nil || got.ID != ids[ws] {
			t.Fatalf("workspace %q: %+v, %v", ws, got, err)
		}
	}
}

func TestBounds(t *testing.T) {
	addr := testenv.RedisAddr(t)
	s := open(t, addr, uniquePrefix(t, addr), redis.Config{MaxNamespaces: 2, MaxOverrides: 2})
	ctx := context.Background()
	a, err := s.EnsureNamespace(ctx, "ws", "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnsureNamespace(ctx, "ws", "b"); err != nil {
		t.Fatal(err)
	}
	set := func(identifier string) error {
		_, err := s.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: a.ID, Identifier: identifier, Limit: 1, Duration: time.Second})
		return err
	}
	for _, tc := range []struct {
		name string
		op   func() error
		want error
	}{
		{"existing namespace at the bound", func() error { _, err := s.EnsureNamespace(ctx, "ws", "a"); return err }, nil},
		{"new namespace past the bound", func() error { _, err := s.EnsureNamespace(ctx, "ws", "c"); return err }, store.ErrLimitReached},
		{"other workspace has its own bound", func() error { _, err := s.EnsureNamespace(ctx, "ws2", "c"); return err }, nil},
		{"first override", func() error { return set("x") }, nil},
		{"second override", func() error { return set("y") }, nil},
		{"replacing at the bound", func() error { return set("x") }, nil},
		{"new override past the bound", func() error { return set("z") }, store.ErrLimitReached},
		{"delete makes room", func() error { return s.DeleteOverride(ctx, "ws", a.ID, "y") }, nil},
		{"then a new one fits", func() error { return set("z") }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.op(); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := s.Namespace(ctx, "ws", "c"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused namespace exists: %v", err)
	}
}

func TestSetOverrideNeedsTheWorkspacesNamespace(t *testing.T) {
	addr := testenv.RedisAddr(t)
	s := open(t, addr, uniquePrefix(t, addr), redis.Config{})
	ctx := context.Background()
	ns, err := s.EnsureNamespace(ctx, "ws", "api")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, ws, nsID string }{
		{"unknown id", "ws", "rlns_000000000000000000000000"},
		{"other workspace", "other", ns.ID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.SetOverride(ctx, store.Override{Workspace: tc.ws, NamespaceID: tc.nsID, Identifier: "x", Limit: 1, Duration: time.Second})
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("err %v, want ErrNotFound", err)
			}
		})
	}
}

// TestWatchReportsOtherStoresWrites: a write through one store (node) is
// reported to a watcher on another store of the same prefix, and not to
// one of another prefix.
func TestWatchReportsOtherStoresWrites(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := uniquePrefix(t, addr)
	a := open(t, addr, prefix, redis.Config{})
	b := open(t, addr, prefix, redis.Config{})
	other := open(t, addr, uniquePrefix(t, addr), redis.Config{})
	changes := storetest.Watch(t, a)
	otherChanges := storetest.Watch(t, other)
	storetest.WaitChanged(t, changes, 5*time.Second, "the first subscription")
	storetest.WaitChanged(t, otherChanges, 5*time.Second, "the first subscription (other prefix)")
	ctx := context.Background()
	var ns store.Namespace
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"namespace created", func() (err error) { ns, err = b.EnsureNamespace(ctx, "ws", "api"); return err }},
		{"override set", func() error {
			_, err := b.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: "x", Limit: 1, Duration: time.Second})
			return err
		}},
		{"override replaced", func() error {
			_, err := b.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: "x", Limit: 2, Duration: time.Second})
			return err
		}},
		{"override deleted", func() error { return b.DeleteOverride(ctx, "ws", ns.ID, "x") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Drain(changes)
			if err := tc.op(); err != nil {
				t.Fatal(err)
			}
			storetest.WaitChanged(t, changes, time.Second, tc.name)
		})
	}
	select {
	case <-otherChanges:
		t.Fatal("a watcher of another prefix was told about the change")
	default:
	}
}

// TestCachePropagation: two nodes' caches over one Redis see each other's
// writes through the change channel.
func TestCachePropagation(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := uniquePrefix(t, addr)
	storetest.RunCachePropagation(t, open(t, addr, prefix, redis.Config{}), open(t, addr, prefix, redis.Config{}), "ws-propagation")
}

// TestWatchResubscribes drops the subscription's connection (Redis
// unreachable through the proxy), writes while it is down (the message is
// lost), and brings it back: the watcher resubscribes by itself and
// reports a change, so the cache refreshes and sees the missed write.
func TestWatchResubscribes(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := uniquePrefix(t, addr)
	proxy := testenv.NewProxy(t, addr)
	watched := open(t, proxy.Addr(), prefix, redis.Config{})
	writer := open(t, addr, prefix, redis.Config{})
	changes := storetest.Watch(t, watched)
	storetest.WaitChanged(t, changes, 5*time.Second, "the first subscription")

	proxy.Down()
	if _, err := writer.EnsureNamespace(context.Background(), "ws", "while-down"); err != nil {
		t.Fatal(err)
	}
	storetest.Drain(changes)
	proxy.Up()
	storetest.WaitChanged(t, changes, 10*time.Second, "the resubscription after Redis came back")
}

// TestUnavailable: with Redis unreachable every operation fails with
// store.ErrUnavailable, the first after trying, the next ones at once (the
// cool-down) rather than each after a timeout. When Redis is back, a
// successful Ping ends the cool-down and everything works again on the same
// store.
func TestUnavailable(t *testing.T) {
	addr := testenv.RedisAddr(t)
	proxy := testenv.NewProxy(t, addr)
	s := open(t, proxy.Addr(), uniquePrefix(t, addr), redis.Config{Timeout: 500 * time.Millisecond, Cooldown: time.Minute})
	ctx := context.Background()
	ns, err := s.EnsureNamespace(ctx, "ws", "api")
	if err != nil {
		t.Fatal(err)
	}
	ops := []struct {
		name string
		op   func() error
	}{
		{"EnsureNamespace", func() error { _, err := s.EnsureNamespace(ctx, "ws", "new"); return err }},
		{"Namespace", func() error { _, err := s.Namespace(ctx, "ws", "api"); return err }},
		{"SetOverride", func() error {
			_, err := s.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: "x", Limit: 1, Duration: time.Second})
			return err
		}},
		{"Override", func() error { _, err := s.Override(ctx, "ws", ns.ID, "x"); return err }},
		{"ListOverrides", func() error { _, err := s.ListOverrides(ctx, "ws", ns.ID, "", 10); return err }},
		{"DeleteOverride", func() error { return s.DeleteOverride(ctx, "ws", ns.ID, "x") }},
		{"Snapshot", func() error { _, err := s.Snapshot(ctx); return err }},
	}
	proxy.Down()
	if err := s.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Ping with Redis down: %v, want ErrUnavailable", err)
	}
	for _, tc := range ops {
		t.Run("down/"+tc.name, func(t *testing.T) {
			start := time.Now()
			err := tc.op()
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("err %v, want ErrUnavailable", err)
			}
			// Dialling alone retries for 400 ms; a refusal in the
			// cool-down does not touch the network.
			if d := time.Since(start); d > 200*time.Millisecond {
				t.Fatalf("took %v in the cool-down (%v)", d, err)
			}
		})
	}
	proxy.Up()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after recovery: %v", err)
	}
	for _, tc := range ops {
		t.Run("up/"+tc.name, func(t *testing.T) {
			if err := tc.op(); err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("after recovery: %v", err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	for _, tc := range []struct {
		name string
		cfg  redis.Config
		bad  bool
	}{
		{"no client", redis.Config{}, true},
		{"brace in prefix", redis.Config{Client: client, KeyPrefix: "a{b}"}, true},
		{"space in prefix", redis.Config{Client: client, KeyPrefix: "a b"}, true},
		{"negative timeout", redis.Config{Client: client, Timeout: -1}, true},
		{"negative namespaces", redis.Config{Client: client, MaxNamespaces: -1}, true},
		{"negative overrides", redis.Config{Client: client, MaxOverrides: -1}, true},
		{"negative cooldown", redis.Config{Client: client, Cooldown: -1}, true},
		{"defaults", redis.Config{Client: client}, false},
		{"prefix", redis.Config{Client: client, KeyPrefix: "app:sluice"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err != nil) != tc.bad || (err != nil && !errors.Is(err, redis.ErrInvalidConfig)) {
				t.Fatalf("Validate() = %v", err)
			}
			if _, err := redis.New(tc.cfg); (err != nil) != tc.bad {
				t.Fatalf("New() = %v", err)
			}
		})
	}
}
