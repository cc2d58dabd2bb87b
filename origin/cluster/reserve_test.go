package cluster

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

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

// TestLoadMany runs origintest's LoadMany cases through each node of a
// 2-node cluster: each call reads counters owned by both nodes, at this
// node's store and through peer calls.
func TestLoadMany(t *testing.T) {
	nodes := newTestCluster(t, 2, "s")
	for _, nd := range nodes {
		t.Run(nd.o.ID(), func(t *testing.T) { origintest.LoadMany(t, nd.o) })
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

// TestReservationOnTheWire sends a reservation through the decide call's
// JSON: this version reads it back whole, and a version before
// reservations (a decide request without rw and rs) reads a check of the
// holder, with nothing sent, so it keeps the admitted units under the
// holder and never under the node's writer.
func TestReservationOnTheWire(t *testing.T) {
	c := origin.Check{Key: origin.Key{Namespace: "n", Identifier: "i", Duration: time.Minute}, Seq: 7, Elapsed: 5,
		Writer: 0x11, Sent: 9, Holder: 0x22, Imported: origin.Imported{Current: 3, Previous: 4}, Asks: []origin.Ask{{Limit: 10, Cost: 1}}}
	body, err := json.Marshal(toDecideRequest(c))
	if err != nil {
		t.Fatal(err)
	}
	var now decideRequest
	if err := json.Unmarshal(body, &now); err != nil {
		t.Fatal(err)
	}
	if got := now.check(); !reflect.DeepEqual(got, c) {
		t.Errorf("read back %+v, want %+v", got, c)
	}
	var before struct {
		W    origin.Writer `json:"w"`
		Sent int64         `json:"sn"`
	}
	if err := json.Unmarshal(body, &before); err != nil {
		t.Fatal(err)
	}
	if before.W != c.Holder || before.Sent != 0 {
		t.Errorf("an older owner reads writer %#x sent %d, want the holder %#x and 0", before.W, before.Sent, c.Holder)
	}
}
