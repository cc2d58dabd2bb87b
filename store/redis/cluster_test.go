package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestCluster runs the conformance suite on a real Redis Cluster (the
// scripts and pipelines would fail with CROSSSLOT if a workspace's keys
// spanned slots) and checks that a write through one node's store is
// reported to another's Watch (PUBLISH from a script reaches subscribers
// on every cluster node).
func TestCluster(t *testing.T) {
	addrs := testenv.RedisClusterAddrs(t)
	newClient := func() *goredis.ClusterClient {
		c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return c
	}
	prefix := newPrefix()
	cleaner := newClient()
	t.Cleanup(func() {
		err := cleaner.ForEachMaster(context.Background(), func(ctx context.Context, c *goredis.Client) error {
			return deleteUnder(ctx, c, prefix)
		})
		if err != nil {
			t.Errorf("cleanup of %s: %v", prefix, err)
		}
	})
	newStore := func() *redis.Store {
		s, err := redis.New(redis.Config{Client: newClient(), KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := newStore(), newStore()

	t.Run("conformance", func(t *testing.T) { storetest.Run(t, a, "ws-cluster") })

	t.Run("watch", func(t *testing.T) {
		changes := storetest.Watch(t, a)
		storetest.WaitChanged(t, changes, 5*time.Second, "the first subscription")
		ctx := context.Background()
		for _, ws := range []string{"w1", "w2", "w3", "{w4}"} { // several slots
			storetest.Drain(changes)
			ns, err := b.EnsureNamespace(ctx, ws, "api")
			if err != nil {
				t.Fatal(err)
			}
			storetest.WaitChanged(t, changes, time.Second, "namespace created in "+ws)
			storetest.Drain(changes)
			if _, err := b.SetOverride(ctx, store.Override{Workspace: ws, NamespaceID: ns.ID, Identifier: "x", Limit: 1, Duration: time.Second}); err != nil {
				t.Fatal(err)
			}
			storetest.WaitChanged(t, changes, time.Second, "override set in "+ws)
		}
		snap, err := a.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var overrides int
		for _, o := range snap.Overrides {
			if o.Identifier == "x" {
				overrides++
			}
		}
		if overrides != 4 {
			t.Fatalf("the snapshot across slots has %d of the 4 overrides", overrides)
		}
	})
}
