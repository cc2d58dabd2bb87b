package sim

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testenv"
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
	before := testenv.HeapInUse()
	now := time.UnixMilli(1_800_000_000_000)
	for _, id := range ids {
		if _, err := l.Ratelimit(context.Background(), sluice.Request{Namespace: "ns", Identifier: id, Limit: 10, Duration: time.Minute, Cost: 1, Time: now}); err != nil {
			t.Fatal(err)
		}
	}
	per := float64(testenv.HeapInUse()-before) / cells
	runtime.KeepAlive(ids)
	t.Logf("%.0f bytes of heap per cell (cellHeapBytes = %d)", per, cellHeapBytes)
	if per < 0.75*cellHeapBytes || per > 1.25*cellHeapBytes {
		t.Fatalf("a cell takes %.0f bytes of heap: set cellHeapBytes to it", per)
	}
}

// TestSkewAndCosts runs one region at 2x the limit over 1,000 identifiers
// picked by a Zipf distribution: identifier 0 gets the most requests and the
// 100 identities listed are those admitted most above the model; and the
// modelled Redis commands add up from the calls counted (at least 4 per
// replayed cell and 2 per load, at most 8 per decision or cell); the keys
// written, a floor under any store's commands, are at most one per
// identity and window, and each took this origin at least three commands
// (an HMGET, an HSET and the PEXPIRE of a new key).
func TestSkewAndCosts(t *testing.T) {
	t.Parallel() // one core of simulation: the package's long runs share both
	s := Scenario{Name: "skewed", Regions: 1, Nodes: 3, Limit: 10, Window: 10 * time.Second, Windows: 2,
		Load: 2, Identifiers: 1000, Skew: 1.1, Band: Band{MaxOverPct: 100}}
	r, err := Run(s, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Identities) != maxIdentities {
		t.Fatalf("%d identities listed, want %d", len(r.Identities), maxIdentities)
	}
	counts := map[string]int64{}
	for _, id := range r.Identities {
		counts[id.Identifier] = id.Reference
	}
	if counts[identifier(0)] != 2*s.Limit { // identifier 0 is over its limit in both windows
		t.Errorf("identifier 0 admitted %d by the model, want %d: is it the most requested?", counts[identifier(0)], 2*s.Limit)
	}
	o := r.Origin
	calls := o.Loads + o.Applies + o.Decides
	commands := r.RedisCallsPerRequest * float64(r.Requests)
	if commands < float64(2*o.Loads+4*o.Applies) || commands > float64(8*(calls+r.Requests)) {
		t.Errorf("%.0f Redis commands for %d loads, %d replay calls, %d decisions and %d requests", commands, o.Loads, o.Applies, o.Decides, r.Requests)
	}
	by := r.RedisCallsByCall
	if sum := by.Load + by.Apply + by.Decide; math.Abs(sum-r.RedisCallsPerRequest) > 0.001 || by.Load == 0 || by.Apply == 0 || by.Decide == 0 {
		t.Errorf("Redis commands by call %+v (sum %v), want each above 0 and the sum %v", by, sum, r.RedisCallsPerRequest)
	}
	keys := r.RedisKeysWrittenPerRequest * float64(r.Requests)
	if keys < 1 || keys > float64(s.Identifiers*(s.Windows+1)) || 3*r.RedisKeysWrittenPerRequest > by.Apply+by.Decide+0.0002 {
		t.Errorf("%.0f keys written (%v per request) for %d identities over %d windows, with %v replay and decision commands per request",
			keys, r.RedisKeysWrittenPerRequest, s.Identifiers, s.Windows, by.Apply+by.Decide)
	}
	if r.CellsPerNode == 0 || r.HeapBytesPerNode < r.CellsPerNode*cellHeapBytes || r.OriginBytesPerNodePerSecond == 0 {
		t.Errorf("cells %d, heap %d, bytes %v", r.CellsPerNode, r.HeapBytesPerNode, r.OriginBytesPerNodePerSecond)
	}
	if r.OverAdmission != r.OverPct {
		t.Errorf("over_admission %v, over_pct %v", r.OverAdmission, r.OverPct)
	}
}
