package redis

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/sluicehq/sluice/origin"
)

// Fast unit tests on miniredis; the real-Redis tests are the reference.

func TestMiniredisApplyLoadExpire(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	o := newOrigin(t, Config{Client: newTestClient(t, mr.Addr()), MinTTL: time.Second})
	ctx := context.Background()
	k := origin.Key{Workspace: "w", Namespace: "n", Identifier: "i", Duration: time.Minute}
	got, err := o.Apply(ctx, []origin.Delta{add(origin.Cell{Key: k, Sequence: 2}, 4), add(origin.Cell{Key: k, Sequence: 1}, 6)})
	if err != nil || got[0].Count != 4 || got[1].Count != 6 {
		t.Fatalf("Apply = %v, %v", got, err)
	}
	if ttl := mr.TTL(CellKey(origin.Cell{Key: k, Sequence: 2})); ttl != 3*time.Minute {
		t.Fatalf("TTL = %v, want 3m", ttl)
	}
	c, err := o.Load(ctx, k, 2)
	if err != nil || c != (origin.Counts{Current: 4, Previous: 6}) {
		t.Fatalf("Load = %+v, %v", c, err)
	}
	mr.FastForward(3*time.Minute + time.Millisecond)
	c, err = o.Load(ctx, k, 2)
	if err != nil || c != (origin.Counts{}) {
		t.Fatalf("Load after expiry = %+v, %v; want zeros", c, err)
	}
}

// TestMiniredisNoScript flushes the script cache between calls: Apply must
// fall back to EVAL for the cells answered NOSCRIPT, without applying any
// delta twice.
func TestMiniredisNoScript(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	client := newTestClient(t, mr.Addr())
	o := newOrigin(t, Config{Client: client})
	ctx := context.Background()
	k := origin.Key{Namespace: "n", Identifier: "i", Duration: time.Second}
	deltas := []origin.Delta{add(origin.Cell{Key: k, Sequence: 1}, 1), add(origin.Cell{Key: k, Sequence: 2}, 10)}
	for round := int64(1); round <= 3; round++ {
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		deltas[0].Sent, deltas[1].Sent = round, 10*round // each round's write raises the count
		got, err := o.Apply(ctx, deltas)
		if err != nil || got[0].Count != round || got[1].Count != 10*round {
			t.Fatalf("round %d: Apply = %v, %v", round, got, err)
		}
	}
	if s := o.BreakerState(); s != BreakerClosed {
		t.Fatalf("breaker %v", s)
	}
}
