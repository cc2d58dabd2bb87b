package sluice

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"

	globalmemory "github.com/sluicehq/sluice/global/memory"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
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
		s.remember(imports, nil, 1_000)
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

// TestLeaderKnowsWhatItRead: a leader knows a cell (and writes its next
// import as a known one, every region's entry and the imported count)
// only after the origin told it what it stores and the leader holds every
// entry summed there; an import that read nothing, one that failed, and a
// denial's import leave the cell unknown.
func TestLeaderKnowsWhatItRead(t *testing.T) {
	cell := origin.Cell{Key: origin.Key{Namespace: "ns", Identifier: "id", Duration: time.Minute}, Sequence: 7}
	rcs := func(pairs ...any) []origin.RegionCount {
		var out []origin.RegionCount
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, origin.RegionCount{Region: pairs[i].(string), Count: int64(pairs[i+1].(int))})
		}
		return out
	}
	read := func(sum, imported int64, counts ...any) []origin.Stored {
		return []origin.Stored{{Read: true, Counts: rcs(counts...), Sum: sum, Imported: imported}}
	}
	type step struct {
		name      string
		counts    []origin.RegionCount // the import's rising entries
		usage     int64
		stored    []origin.Stored // what the origin returns (nil: a plain Import)
		failed    bool
		wantKnown origin.Import // the import as asKnown leaves it
	}
	steps := []step{
		{name: "a first import is read", counts: rcs("eu", 5), stored: read(5, 5, "eu", 5),
			wantKnown: origin.Import{Cell: cell, Counts: rcs("eu", 5)}},
		{name: "the next is known, with every entry", counts: rcs("us", 2), stored: []origin.Stored{{}},
			wantKnown: origin.Import{Cell: cell, Counts: rcs("eu", 5, "us", 2), Known: true, Imported: 7}},
		{name: "a known import raises an entry", counts: rcs("eu", 9), stored: []origin.Stored{{}},
			wantKnown: origin.Import{Cell: cell, Counts: rcs("eu", 9, "us", 2), Known: true, Imported: 11}},
		{name: "a failed import", counts: rcs("us", 3), failed: true,
			wantKnown: origin.Import{Cell: cell, Counts: rcs("eu", 9, "us", 3), Known: true, Imported: 12}},
		{name: "after it the cell is read again", counts: rcs("us", 3), stored: read(15, 15, "us", 3),
			wantKnown: origin.Import{Cell: cell, Counts: rcs("us", 3)}},
		{name: "a read sum above the entries held: another region's entry unknown", counts: rcs("ap", 1), stored: read(16, 16, "ap", 1),
			wantKnown: origin.Import{Cell: cell, Counts: rcs("ap", 1)}},
		{name: "a read that accounts for every entry", counts: rcs("ap", 2), stored: read(14, 14, "ap", 2),
			wantKnown: origin.Import{Cell: cell, Counts: rcs("ap", 2)}},
		{name: "a denial's import is never known", usage: 40, failed: false, stored: nil,
			wantKnown: origin.Import{Cell: cell, Usage: 40}},
		{name: "after a denial the cell is read again", counts: rcs("ap", 3), stored: read(15, 26, "ap", 3),
			wantKnown: origin.Import{Cell: cell, Counts: rcs("ap", 3)}},
		{name: "and then known, with the imported count read", counts: rcs("ap", 4), stored: []origin.Stored{{}},
			wantKnown: origin.Import{Cell: cell, Counts: rcs("eu", 9, "us", 3, "ap", 4), Known: true, Imported: 26}},
	}
	s := newLeaderState(origin.Lease{})
	for _, st := range steps {
		imports := []origin.Import{{Cell: cell, Counts: st.counts, Usage: st.usage}}
		s.asKnown(imports)
		if !reflect.DeepEqual(imports[0], st.wantKnown) {
			t.Fatalf("%s: asKnown = %+v, want %+v", st.name, imports[0], st.wantKnown)
		}
		switch {
		case st.failed || st.usage > 0:
			s.unknown(imports)
		default:
			s.remember(imports, st.stored, 1_000)
		}
	}
}

// TestNewTermForgetsWhatItKnew: a leader that takes the lease again after
// another holder led (the fence moved on) knows none of the cells it knew:
// the other holder may have imported them meanwhile.
func TestNewTermForgetsWhatItKnew(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	clock := func() time.Time { return now }
	region := memory.New(clock)
	l, err := newLimiter(Config{Origin: region, Region: "a", Clock: clock,
		Global: &GlobalConfig{Store: globalmemory.New(), Interval: time.Second}},
		drive.Options{GlobalTicks: make(chan time.Time), ReplayTicks: make(chan time.Time)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	var st GlobalStats
	l.lead(ctx, now.UnixMilli(), &st)
	if !l.global.leading {
		t.Fatalf("the node does not lead: %+v", st)
	}
	cell := origin.Cell{Key: origin.Key{Namespace: "ns", Identifier: "id", Duration: time.Minute}, Sequence: now.UnixMilli() / 60_000}
	known := &importedCell{seen: now.UnixMilli(), known: true}
	l.global.lead.imported[cell] = known
	l.lead(ctx, now.UnixMilli(), &st) // a renewal keeps it
	if !known.known {
		t.Fatal("a renewal of the lease forgot a known cell")
	}
	now = now.Add(time.Minute)
	if lease, err := region.Lead(ctx, origin.LeaseRequest{Holder: "another", TTL: time.Second}); err != nil || !lease.Held {
		t.Fatalf("another node takes the lapsed lease: %+v, %v", lease, err)
	}
	now = now.Add(time.Minute)
	l.lead(ctx, now.UnixMilli(), &st)
	if !l.global.leading || known.known {
		t.Fatalf("after another holder's term: leading %v, the cell known %v; want leading, unknown", l.global.leading, known.known)
	}
}
