package sluice_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkRedisCommandsPerAccepted runs a hot-key load (10 keys, 20k
// accepted requests) through a limiter on a Redis of its own and reports the
// Redis commands executed per accepted request, read from INFO commandstats
// (commands run inside scripts included). "burst" sends as fast as it can;
// "20k/s" paces the load at 20,000 requests per second.
func BenchmarkRedisCommandsPerAccepted(b *testing.B) {
	for _, bc := range []struct {
		name string
		rate float64 // requests per second; 0 = unpaced
	}{
		{"burst", 0},
		{"20k/s", 20_000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			server := testenv.StartRedis(b)
			admin := goredis.NewClient(&goredis.Options{Addr: server.Addr})
			defer admin.Close()
			ctx := context.Background()
			for b.Loop() {
				node := newRegionNode(b, server.Addr, sluice.Config{})
				if err := admin.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				const keys, want = 10, 20_000
				accepted := 0
				start := time.Now()
				for i := 0; accepted < want; i++ {
					if bc.rate > 0 {
						if ahead := time.Duration(float64(i)/bc.rate*1e9) - time.Since(start); ahead > 0 {
							time.Sleep(ahead)
						}
					}
					res, err := node.Ratelimit(ctx, sluice.Request{Namespace: "bench", Identifier: "hot-" + strconv.Itoa(i%keys),
						Limit: 1 << 40, Duration: time.Minute, Cost: 1})
					if err != nil {
						b.Fatal(err)
					}
					if res.Success {
						accepted++
					}
				}
				if err := node.Close(); err != nil { // flushes the replay
					b.Fatal(err)
				}
				calls := commandCalls(b, admin)
				b.ReportMetric(float64(calls)/float64(accepted), "cmds/accepted")
			}
		})
	}
}

// commandCalls sums the calls of every command in INFO commandstats, except
// the INFO and CONFIG commands the benchmark itself sent.
func commandCalls(b *testing.B, admin *goredis.Client) int64 {
	var total int64
	for name, n := range testenv.CommandCalls(b, admin) {
		if name != "info" && !strings.HasPrefix(name, "config") {
			total += n
		}
	}
	return total
}
