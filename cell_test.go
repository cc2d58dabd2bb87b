package sluice

import (
	"testing"
	"unsafe"

	"github.com/sluicehq/sluice/origin"
)

// TestCellFitsItsSizeClass guards the memory budget (about 200 bytes of heap
// per active cell, see docs/benchmarks.md): a cell and its key must stay
// within the 160-byte allocation class together with the trie entry's two
// words.
func TestCellFitsItsSizeClass(t *testing.T) {
	const entryHeader = 16 // hashtrie entry: node header and overflow pointer
	size := entryHeader + unsafe.Sizeof(origin.Cell{}) + unsafe.Sizeof(cell{})
	if size > 160 {
		t.Fatalf("trie entry for a cell is %d bytes, over the 160-byte size class", size)
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
