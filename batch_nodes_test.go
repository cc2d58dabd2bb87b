package sluice_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/batchrace"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
	"github.com/sluicehq/sluice/origin/redis"
)

// TestBatchesAcrossNodes races two limiters on one origin for the last 3
// units of five counters (limit 20, 17 spent and at the origin before the
// race) with batches of 2 to 5 of them, sent to either node, one at a time
// and from eight senders at once: no counter is spent past its limit, and
// the origin holds exactly what was admitted. Near the limit, decisions go
// to the origin (OriginMargin); before batches reserved their units there,
// each node read the origin and admitted from its own view: up to 23 of 20
// in this test.
func TestBatchesAcrossNodes(t *testing.T) {
	origins := []struct {
		name  string
		nodes func(t *testing.T) []origin.Origin
	}{
		{"one store", func(*testing.T) []origin.Origin {
			s := memory.New(nil)
			return []origin.Origin{s, s}
		}},
		{"one Redis", func(t *testing.T) []origin.Origin {
			return redisNodes(t, "redis://"+testenv.RedisAddr(t))
		}},
		{"Redis Cluster", func(t *testing.T) []origin.Origin {
			addrs := testenv.RedisClusterAddrs(t)
			return redisNodes(t, "redis://"+addrs[0]+"?cluster=true&addr="+strings.Join(addrs[1:], "&addr="))
		}},
	}
	senders := []struct {
		name             string
		senders, batches int
	}{
		{"sequential", 1, 40},
		{"concurrent", 8, 5},
	}
	for _, o := range origins {
		for _, s := range senders {
			t.Run(o.name+"/"+s.name, func(t *testing.T) {
				batchrace.Run(t, batchrace.Config{Origins: o.nodes(t), Senders: s.senders, Batches: s.batches,
					Counters: 5, Limit: 20, Primed: 17})
			})
		}
	}
}

// redisNodes returns two Redis origins on url, as two nodes of a region
// have, closed when t ends.
func redisNodes(t *testing.T, url string) []origin.Origin {
	t.Helper()
	nodes := make([]origin.Origin, 2)
	for i := range nodes {
		client, err := redis.NewClient(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		o, err := redis.New(redis.Config{Client: client})
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = o
	}
	return nodes
}
