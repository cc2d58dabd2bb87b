package sim

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestCellHeapBytes measures the heap a limiter takes per counter cell,
// besides its identity's strings (made before the measure), and checks that
// cellHeapBytes, which the simulator's heap figures use, is within 25% of
// it.
func TestCellHeapBytes(t *testing.T) {
	const cells = 200_000
	ids := make([]string, cells)
	for i := range ids {
		ids[i] = fmt.Sprintf("user-%07d", i)
	}
	l, err := sluice.New(sluice.Config{MaxCounters: 2 * cells})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := heapInUse()
	now := time.UnixMilli(1_800_000_000_000)
	for _, id := range ids {
		if _, err := l.Ratelimit(context.Background(), sluice.Request{Namespace: "ns", Identifier: id, Limit: 10, Duration: time.Minute, Cost: 1, Time: now}); err != nil {
			t.Fatal(err)
		}
	}
	per := float64(heapInUse()-before) / cells
	runtime.KeepAlive(ids)
	t.Logf("%.0f bytes of heap per cell (cellHeapBytes = %d)", per, cellHeapBytes)
	if per < 0.75*cellHeapBytes || per > 1.25*cellHeapBytes {
		t.Fatalf("a cell takes %.0f bytes of heap: set cellHeapBytes to it", per)
	}
}

func heapInUse() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
