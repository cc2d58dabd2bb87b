package cluster

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/origin"
)

// BenchmarkDecideRPC measures strict-mode decisions of counters a peer
// owns, signed, sent over h2c on loopback, checked and decided by the
// owner, both nodes in one process: one caller at a time (every decision
// in a call of its own, so ns/op is one RPC's round trip), and 32 callers
// on 64 counters (decisions made while a call is on its way share the next
// one; ns/op is then about the CPU of both sides per decision). rpcs/op is
// the peer calls per decision.
func BenchmarkDecideRPC(b *testing.B) {
	for _, bc := range []struct {
		name        string
		parallelism int // callers per GOMAXPROCS; 0: one caller
	}{
		{"one caller", 0},
		{"32 callers", 16},
	} {
		b.Run(bc.name, func(b *testing.B) {
			nodes := newTestCluster(b, 2, "secret")
			a, owner := nodes[0], nodes[1]
			keys := ownedBy(a.o.Ring(), owner.o.ID(), 64)
			var callers atomic.Uint64
			decide := func(ctx context.Context, i uint64, sent *int64) {
				c := origin.Check{Key: keys[i%uint64(len(keys))], Seq: 5, Writer: origin.Writer(i + 1), Sent: *sent,
					Asks: []origin.Ask{{Limit: 1 << 40, Cost: 1}}}
				v, err := a.o.Decide(ctx, c)
				if err != nil {
					b.Fatal(err)
				}
				if v.Admitted[0] {
					*sent++
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			if bc.parallelism == 0 {
				var sent int64
				for b.Loop() {
					decide(context.Background(), 0, &sent)
				}
			} else {
				b.SetParallelism(bc.parallelism)
				b.RunParallel(func(pb *testing.PB) {
					i, sent := callers.Add(1), int64(0)
					for pb.Next() {
						decide(context.Background(), i, &sent)
					}
				})
			}
			b.StopTimer()
			rpcs := a.obs.count(KindDecide, OutcomeOK) + a.obs.count(KindDecides, OutcomeOK)
			b.ReportMetric(float64(rpcs)/float64(b.N), "rpcs/op")
		})
	}
}
