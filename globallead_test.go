package sluice

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
)

// TestForgetImported: a leader forgets a cell's imported entries once the
// cell has expired or no pull has read any of them for importMemory, and
// keeps the others, with the names of their regions.
func TestForgetImported(t *testing.T) {
	const now = 1_000_000
	cell := func(id string, seq int64) origin.Cell {
		return origin.Cell{Key: origin.Key{Namespace: "ns", Identifier: id, Duration: time.Minute}, Sequence: seq}
	}
	entry := func(seen int64, regions ...string) *importedCell {
		c := &importedCell{seen: seen}
		for _, r := range regions {
			c.raise(r, 3)
		}
		return c
	}
	live := now / time.Minute.Milliseconds()
	s := newLeaderState(origin.Lease{})
	s.imported = map[origin.Cell]*importedCell{
		cell("read lately", live):       entry(now-1_000, "eu", "ap"),
		cell("read long ago", live):     entry(now-importMemory-1, "sa"),
		cell("read at the bound", live): entry(now-importMemory, "us"),
		cell("expired", live-2):         entry(now, "af"),
	}
	s.entries = 5
	s.forget(now)
	var kept []string
	for k := range s.imported {
		kept = append(kept, k.Identifier)
	}
	slices.Sort(kept)
	if want := []string{"read at the bound", "read lately"}; !slices.Equal(kept, want) {
		t.Fatalf("kept %v, want %v", kept, want)
	}
	names := slices.Sorted(maps.Keys(s.regions))
	if want := []string{"ap", "eu", "us"}; !slices.Equal(names, want) || s.entries != 3 {
		t.Fatalf("regions %v, %d entries; want %v, 3", names, s.entries, want)
	}
}

// TestLeaderHeapBytes measures what a leader keeps of the cells it
// handles: its record of the entries it imported, per cell with nine other
// regions' entries, each read from rows of their own (the store decodes
// each row's identifiers afresh), and its record of the counts it wrote;
// and checks that heapBytes, which GlobalStats.LeaderHeapBytes reports, is
// within 25% of each.
func TestLeaderHeapBytes(t *testing.T) {
	const cells, regions = 50_000, 9
	key := func(i int) origin.Cell {
		k := origin.Key{Workspace: "ws", Namespace: "ns", Identifier: fmt.Sprintf("user-%07d", i), Duration: time.Minute}
		return origin.Cell{Key: k, Sequence: 7}
	}
	s := newLeaderState(origin.Lease{})
	before := testenv.HeapInUse()
	for r := range regions {
		imports := make([]origin.Import, cells)
		for i := range imports {
			imports[i] = origin.Import{Cell: key(i), Counts: []origin.RegionCount{{Region: fmt.Sprintf("region-%d", r), Count: 5}}}
		}
		s.remember(imports, 1_000)
	}
	imported := testenv.HeapInUse() - before
	for i := range cells {
		s.written[key(i)] = 5
	}
	written := testenv.HeapInUse() - before - imported
	runtime.KeepAlive(s.imported)
	runtime.KeepAlive(s.written)
	estimate := s.heapBytes()
	wantImported := estimate - cells*countHeapBytes
	t.Logf("per cell: %d bytes imported from %d regions (estimate %d), %d written (estimate %d)",
		imported/cells, regions, wantImported/cells, written/cells, countHeapBytes)
	for _, c := range []struct {
		name      string
		got, want int64
	}{{"imported", imported, wantImported}, {"written", written, cells * countHeapBytes}} {
		if float64(c.got) < 0.75*float64(c.want) || float64(c.got) > 1.25*float64(c.want) {
			t.Errorf("%s: %d bytes a cell, estimated %d: set the leader's heap constants to it", c.name, c.got/cells, c.want/cells)
		}
	}
}
