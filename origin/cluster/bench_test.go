package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/origin"
)

// BenchmarkDecideRPC measures one strict-mode decision of a counter a peer
// owns: the peer RPC that cluster mode makes for each admission of a
// counter in strict mode, signed, sent over h2c on loopback, checked and
// decided by the owner, in one process (so ns/op is the CPU of both
// sides while the calls run in parallel).
func BenchmarkDecideRPC(b *testing.B) {
	nodes := newTestCluster(b, 2, "secret")
	nd := nodes[0]
	var k origin.Key
	for i := 0; k.Duration == 0; i++ {
		if c := key(fmt.Sprintf("u%d", i)); nd.o.Ring().Owner(c) != nd.o.ID() {
			k = c
		}
	}
	var writers atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		w := origin.Writer(writers.Add(1))
		var sent int64
		for pb.Next() {
			v, err := nd.o.Decide(ctx, origin.Check{Key: k, Seq: 5, Writer: w, Sent: sent,
				Asks: []origin.Ask{{Limit: 1 << 40, Cost: 1}}})
			if err != nil {
				b.Fatal(err)
			}
			if v.Admitted[0] {
				sent++
			}
		}
	})
}
