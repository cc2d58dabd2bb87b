package cluster

import (
	"testing"

	"github.com/sluicehq/sluice/internal/batchrace"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/origintest"
)

// TestReservations runs the reservation and withdrawal cases of
// origintest through each node of a 2-node cluster: a case's counter is
// owned by one of them, so each runs both at the owner and through a peer
// call.
func TestReservations(t *testing.T) {
	nodes := newTestCluster(t, 2, "s")
	for _, nd := range nodes {
		t.Run(nd.o.ID(), func(t *testing.T) { origintest.Reservations(t, nd.o) })
	}
}

// TestBatchesAcrossClusterNodes is sluice's TestBatchesAcrossNodes on the
// cluster origin: limiters on two nodes race for the last 3 units of five
// counters (limit 20) with batches of 2 to 5 of them, decided at each
// counter's owner near the limit; no counter is spent past its limit and
// the owners hold exactly what was admitted.
func TestBatchesAcrossClusterNodes(t *testing.T) {
	for _, tc := range []struct {
		name             string
		senders, batches int
	}{
		{"sequential", 1, 40},
		{"concurrent", 8, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := newTestCluster(t, 2, "s")
			batchrace.Run(t, batchrace.Config{Origins: []origin.Origin{nodes[0].o, nodes[1].o},
				Senders: tc.senders, Batches: tc.batches, Counters: 5, Limit: 20, Primed: 17})
		})
	}
}
