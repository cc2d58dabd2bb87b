package origintest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// LoadMany checks that o, which must be an [origin.BatchLoader], reads
// several counters as Load reads each: in order, a counter asked twice
// twice, a counter it does not know as zero, and cells of counters of
// different windows in one call.
func LoadMany(t *testing.T, o origin.Origin) {
	bl, ok := o.(origin.BatchLoader)
	if !ok {
		t.Fatalf("%T is not an origin.BatchLoader", o)
	}
	now := time.Now()
	key := func(name string, d time.Duration) origin.Key {
		return origin.Key{Workspace: "origintest", Namespace: "loadmany",
			Identifier: fmt.Sprintf("%s-%s-%d", t.Name(), name, now.UnixNano()), Duration: d}
	}
	a, b, c := key("a", time.Hour), key("b", time.Minute), key("unknown", time.Hour)
	seqA, seqB := now.UnixMilli()/time.Hour.Milliseconds(), now.UnixMilli()/time.Minute.Milliseconds()
	at := func(k origin.Key, seq int64) origin.Cell { return origin.Cell{Key: k, Sequence: seq} }
	ctx := context.Background()
	if _, err := o.Apply(ctx, []origin.Delta{
		{Cell: at(a, seqA), Writer: 1, Sent: 3},
		{Cell: at(a, seqA-1), Writer: 1, Sent: 2},
		{Cell: at(b, seqB), Writer: 2, Sent: 5},
	}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	cases := []struct {
		name  string
		cells []origin.Cell
	}{
		{"none", nil},
		{"one", []origin.Cell{at(a, seqA)}},
		{"several, one twice, one unknown", []origin.Cell{at(b, seqB), at(a, seqA), at(c, seqA), at(a, seqA)}},
		{"the cell after the written ones", []origin.Cell{at(a, seqA+1), at(b, seqB+1)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bl.LoadMany(ctx, tc.cells)
			if err != nil {
				t.Fatalf("LoadMany: %v", err)
			}
			if len(got) != len(tc.cells) {
				t.Fatalf("LoadMany: %d counts for %d cells", len(got), len(tc.cells))
			}
			for i, cell := range tc.cells {
				want, err := o.Load(ctx, cell.Key, cell.Sequence)
				if err != nil {
					t.Fatalf("Load of cell %d: %v", i, err)
				}
				if got[i] != want {
					t.Errorf("cell %d (%s, %d): LoadMany %+v, Load %+v", i, cell.Identifier, cell.Sequence, got[i], want)
				}
			}
		})
	}
	t.Run("counts", func(t *testing.T) {
		got, err := bl.LoadMany(ctx, []origin.Cell{at(a, seqA), at(b, seqB)})
		if err != nil {
			t.Fatalf("LoadMany: %v", err)
		}
		want := []origin.Counts{{Current: 3, Previous: 2}, {Current: 5}}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("cell %d: %+v, want %+v", i, got[i], want[i])
			}
		}
	})
}
