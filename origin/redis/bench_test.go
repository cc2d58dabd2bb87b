package redis

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
)

// Benchmarks against the real Redis (internal/testenv). Besides time and
// allocations they report, from the server's INFO commandstats, the Redis
// commands executed per cell: EVALSHA itself plus the commands inside the
// script (Redis counts both).
//
//	go test -run '^$' -bench . -benchtime 2s ./origin/redis/

// countedCommands are the commands this package causes; other clients of the
// shared test server use others (or, rarely, the same: run alone for exact
// figures).
var countedCommands = []string{"evalsha", "eval", "hget", "hmget", "hincrby", "hset", "pttl", "pexpire"}

func reportCommands(b *testing.B, c *goredis.Client, before map[string]int64, cells int64) {
	after := testenv.CommandCalls(b, c)
	var total int64
	for _, name := range countedCommands {
		d := after[name] - before[name]
		total += d
		if d > 0 {
			b.ReportMetric(float64(d)/float64(cells), name+"/cell")
		}
	}
	b.ReportMetric(float64(total)/float64(cells), "redis-cmds/cell")
}

// benchDeltas returns n deltas of one writer, each with a count of 3.
func benchDeltas(ws string, n int, seq int64) []origin.Delta {
	deltas := make([]origin.Delta, n)
	w := newWriter()
	for i := range deltas {
		deltas[i] = origin.Delta{
			Cell:   origin.Cell{Key: origin.Key{Workspace: ws, Namespace: "bench", Identifier: "user-" + strconv.Itoa(i), Duration: time.Minute}, Sequence: seq},
			Writer: w,
			Sent:   3,
		}
	}
	return deltas
}

// raise adds 3 to the count of every delta: a replay round's next write.
func raise(deltas []origin.Delta) {
	for i := range deltas {
		deltas[i].Sent += 3
	}
}

// BenchmarkApply applies a batch of distinct cells per iteration (256, a
// full replay batch, and 1): "existing" cells already hold a count (the
// steady state of a replay loop), "new" cells are created by the batch.
func BenchmarkApply(b *testing.B) {
	for _, batch := range []int{256, 1} {
		for _, mode := range []string{"existing", "new"} {
			b.Run(fmt.Sprintf("%s/batch=%d", mode, batch), func(b *testing.B) { benchApply(b, mode, batch) })
		}
	}
}

func benchApply(b *testing.B, mode string, batch int) {
	client := realRedis(b)
	o := newOrigin(b, Config{Client: client, Timeout: 5 * time.Second})
	ctx := context.Background()
	ws := workspace(b)
	deltas := benchDeltas(ws, batch, 0)
	if _, err := o.Apply(ctx, deltas); err != nil { // load the script, create the cells
		b.Fatal(err)
	}
	before := testenv.CommandCalls(b, client)
	b.ReportAllocs()
	b.ResetTimer()
	seq := int64(0)
	for b.Loop() {
		if mode == "new" {
			b.StopTimer()
			seq++
			deltas = benchDeltas(ws, batch, seq)
			b.StartTimer()
		} else {
			raise(deltas)
		}
		if _, err := o.Apply(ctx, deltas); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cells := int64(b.N) * int64(batch)
	reportCommands(b, client, before, cells)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(cells), "ns/cell")
}

// BenchmarkLoad reads one counter's two cells (two HGETs in one round trip) per
// iteration, serially and from parallel goroutines.
func BenchmarkLoad(b *testing.B) {
	client := realRedis(b)
	o := newOrigin(b, Config{Client: client, Timeout: 5 * time.Second})
	ctx := context.Background()
	deltas := benchDeltas(workspace(b), 1, 7)
	if _, err := o.Apply(ctx, deltas); err != nil {
		b.Fatal(err)
	}
	key := deltas[0].Cell.Key
	b.Run("serial", func(b *testing.B) {
		before := testenv.CommandCalls(b, client)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := o.Load(ctx, key, 7); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		reportCommands(b, client, before, int64(b.N)*2)
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := o.Load(ctx, key, 7); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
