package redis

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/origin"
)

// TestKnownImportsNeverLower drives one Redis with random imports of two
// holders that take the region's lease from each other, each keeping its
// own record of what the origin stores as a leader does: a cell read
// whose stored sum it accounts for is known, its next imports are known
// ones (every entry and the imported count, written without a read), and
// a new term forgets it. Whatever the order, every entry Redis stores of
// a cell is the highest count any holder imported while it held the
// lease, the sum is their sum, the imported count is that sum, and an
// import by a holder without the lease fails with origin.ErrFenced and
// changes nothing.
func TestKnownImportsNeverLower(t *testing.T) {
	client := realRedis(t)
	rapid.Check(t, func(rt *rapid.T) {
		ws := workspace(t) + fmt.Sprint(rapid.Int().Draw(rt, "run"))
		o := newOrigin(t, Config{Client: client, Region: ws})
		ctx := t.Context()
		seq := time.Now().UnixMilli() / time.Minute.Milliseconds()
		cells := []origin.Cell{
			{Key: origin.Key{Workspace: ws, Namespace: "n", Identifier: "a", Duration: time.Minute}, Sequence: seq},
			{Key: origin.Key{Workspace: ws, Namespace: "n", Identifier: "b", Duration: time.Minute}, Sequence: seq},
		}
		regions := []string{"eu", "us", "ap"}
		holders := []string{"h0", "h1"}
		model := map[origin.Cell]map[string]int64{} // the highest count imported, per cell and region
		records := []map[origin.Cell]*knownCell{{}, {}}
		lease := -1 // the holder of the lease, -1 for none
		for range rapid.IntRange(1, 30).Draw(rt, "steps") {
			h := rapid.IntRange(0, 1).Draw(rt, "holder")
			if rapid.IntRange(0, 4).Draw(rt, "take") == 0 {
				if err := client.Set(ctx, o.keys.lease, holders[h], time.Minute).Err(); err != nil {
					rt.Fatal(err)
				}
				if lease != h {
					for _, k := range records[h] {
						k.known = false // a new term, as the leader's lead does
					}
				}
				lease = h
				continue
			}
			c := cells[rapid.IntRange(0, 1).Draw(rt, "cell")]
			rc := origin.RegionCount{Region: rapid.SampledFrom(regions).Draw(rt, "region"), Count: rapid.Int64Range(0, 50).Draw(rt, "count")}
			im := records[h][c].importOf(c, rc)
			stored, err := o.ImportStored(ctx, holders[h], []origin.Import{im})
			if h != lease {
				if !errors.Is(err, origin.ErrFenced) {
					rt.Fatalf("%s imports without the lease (held by %d): %v, want origin.ErrFenced", holders[h], lease, err)
				}
				checkCells(rt, o, cells, model)
				continue
			}
			if err != nil {
				rt.Fatalf("%s imports %+v: %v", holders[h], im, err)
			}
			if model[c] == nil {
				model[c] = map[string]int64{}
			}
			for _, e := range im.Counts {
				model[c][e.Region] = max(model[c][e.Region], e.Count)
			}
			if records[h][c] == nil {
				records[h][c] = &knownCell{entries: map[string]int64{}}
			}
			records[h][c].remember(im, stored[0])
			checkCells(rt, o, cells, model)
		}
	})
}

// knownCell is a holder's record of a cell, as a leader keeps it.
type knownCell struct {
	entries  map[string]int64
	imported int64
	known    bool
}

// importOf returns the import of rc into c as a holder whose record is k
// sends it: known, with every entry, when k is known.
func (k *knownCell) importOf(c origin.Cell, rc origin.RegionCount) origin.Import {
	if k == nil || !k.known {
		return origin.Import{Cell: c, Counts: []origin.RegionCount{rc}}
	}
	all := maps.Clone(k.entries)
	all[rc.Region] = max(all[rc.Region], rc.Count)
	im := origin.Import{Cell: c, Known: true}
	var sum int64
	for r, n := range all {
		im.Counts = append(im.Counts, origin.RegionCount{Region: r, Count: n})
		sum += n
	}
	im.Imported = max(k.imported, sum)
	return im
}

// remember records what im imported and what the origin said it stores.
func (k *knownCell) remember(im origin.Import, st origin.Stored) {
	for _, e := range append(im.Counts, st.Counts...) {
		k.entries[e.Region] = max(k.entries[e.Region], e.Count)
	}
	switch {
	case im.Known:
		k.imported = im.Imported
	case st.Read:
		var sum int64
		for _, n := range k.entries {
			sum += n
		}
		k.imported, k.known = st.Imported, st.Sum == sum
	default:
		k.known = false
	}
}

// checkCells fails rt unless Redis stores, for each cell, model's entries
// (an entry missing counts as 0), their sum and that sum as the imported
// count (missing if the sum is 0).
func checkCells(rt *rapid.T, o *Origin, cells []origin.Cell, model map[origin.Cell]map[string]int64) {
	for _, c := range cells {
		got, err := o.client.HGetAll(rt.Context(), CellKey(c)).Result()
		if err != nil {
			rt.Fatal(err)
		}
		var sum int64
		for _, n := range model[c] {
			sum += n
		}
		held := map[string]int64{}
		for f, v := range got {
			var n int64
			if _, err := fmt.Sscan(v, &n); err != nil {
				rt.Fatalf("cell %s: field %s holds %q", c.Identifier, f, v)
			}
			switch {
			case strings.HasPrefix(f, "g:"):
				held[strings.TrimPrefix(f, "g:")] = n
			case (f == "s" || f == importedField) && n != sum:
				rt.Fatalf("cell %s: %s is %d, want the entries' sum %d (Redis holds %v, imported %v)", c.Identifier, f, n, sum, got, model[c])
			}
		}
		if _, ok := got["s"]; !ok && sum != 0 {
			rt.Fatalf("cell %s: no sum, want %d (Redis holds %v)", c.Identifier, sum, got)
		}
		for _, r := range []string{"eu", "us", "ap"} {
			if held[r] != model[c][r] {
				rt.Fatalf("cell %s: region %s's entry is %d, want %d, the highest imported (Redis holds %v)", c.Identifier, r, held[r], model[c][r], got)
			}
		}
	}
}
