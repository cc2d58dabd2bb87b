package sluice

import (
	"context"
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/origin"
)

// TestCellFitsItsSizeClass guards the memory budget (about 230 bytes of heap
// per active cell, BenchmarkHeapPerCell; see docs/benchmarks.md): a cell and
// its key must stay within the 176-byte allocation class together with the
// trie entry's two words.
func TestCellFitsItsSizeClass(t *testing.T) {
	const entryHeader = 16 // hashtrie entry: node header and overflow pointer
	size := entryHeader + unsafe.Sizeof(origin.Cell{}) + unsafe.Sizeof(cell{})
	if size > 176 {
		t.Fatalf("trie entry for a cell is %d bytes, over the 176-byte size class", size)
	}
}

func TestSweepEvictsOnlyUnreachableCells(t *testing.T) {
	l, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tests := []struct {
		name    string
		seq     int64
		evicted bool
	}{
		{"current cell", 10, false},
		{"previous cell", 9, false},
		{"two cells back", 8, true},
		{"long gone", 1, true},
	}
	const d = 1000
	for _, tc := range tests {
		k := origin.Cell{Key: origin.Key{Namespace: "ns", Identifier: tc.name, Duration: d * 1e6}, Sequence: tc.seq}
		c := l.cells.loadOrCreate(l.cells.keyHash(&k.Key), &k, 1)
		c.raiseStrict((tc.seq + 2) * d) // the latest deadline a denial in seq can set
	}
	live, evicted := l.sweep(10*d + 500)
	if live != 2 || evicted != 2 {
		t.Fatalf("sweep kept %d and evicted %d, want 2 and 2", live, evicted)
	}
	for _, tc := range tests {
		k := origin.Cell{Key: origin.Key{Namespace: "ns", Identifier: tc.name, Duration: d * 1e6}, Sequence: tc.seq}
		if got := l.cells.load(l.cells.keyHash(&k.Key), &k) == nil; got != tc.evicted {
			t.Errorf("%s: evicted = %v, want %v", tc.name, got, tc.evicted)
		}
	}
}

// TestCountsSaturate holds counts next to 2^62 and 2^63 in a cell: the
// usage saturates at math.MaxInt64 instead of wrapping around to a negative
// count that would admit everything.
func TestCountsSaturate(t *testing.T) {
	tests := []struct {
		name               string
		regional, imported int64
		limit              int64
		admitted           bool
	}{
		{"both at 2^62", 1 << 62, 1 << 62, math.MaxInt64, false},
		{"imported at the maximum", 1, math.MaxInt64, math.MaxInt64, false},
		{"regional at the maximum", math.MaxInt64, 0, math.MaxInt64, false},
		{"room for one more", 1 << 62, 1<<62 - 2, math.MaxInt64, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			r := Request{Namespace: "n", Identifier: tc.name, Limit: tc.limit, Duration: time.Hour, Cost: 1, Time: time.UnixMilli(1_700_000_000_000)}
			var q resolved
			if err := resolve(&q, &r, nil); err != nil {
				t.Fatal(err)
			}
			c := l.cells.loadOrCreate(l.cells.keyHash(&q.cell.Key), &q.cell, 1)
			c.regional.Store(tc.regional)
			c.imported.Store(tc.imported)
			res, err := l.Ratelimit(context.Background(), r)
			if err != nil || res.Success != tc.admitted || res.Current < 0 {
				t.Fatalf("%+v, %v; want admitted %v and a count that did not wrap", res, err, tc.admitted)
			}
		})
	}
}
