package origintest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// RegionOrigin is an origin whose nodes share a region's global layer.
type RegionOrigin interface {
	origin.Origin
	origin.Region
}

// Region runs the cases of [origin.Region] against o: the lease (one holder
// at a time, renewals that store the leader's state, a fence that grows
// with each new holder, a lapsed lease taken over), the queue of
// nominations (taken once, oldest first, any bytes in a cell's names) and
// imports (kept apart from the total, raised never lowered, a denial's
// usage counting the region's own count once), read back by Load, Apply
// and Decide. lapse must return once a lease of ttl taken before the call
// has lapsed by o's clock. Each run uses holders and cells of its own.
func Region(t *testing.T, o RegionOrigin, ttl time.Duration, lapse func()) {
	t.Run("lease", func(t *testing.T) { leaseCases(t, o, ttl, lapse) })
	t.Run("nominations", func(t *testing.T) { nominationCases(t, o) })
	t.Run("imports", func(t *testing.T) { importCases(t, o) })
}

func leaseCases(t *testing.T, o RegionOrigin, ttl time.Duration, lapse func()) {
	ctx := context.Background()
	run := time.Now().UnixNano()
	a, b := fmt.Sprintf("a-%d", run), fmt.Sprintf("b-%d", run)
	lead := func(holder string, cursors origin.Cursors) origin.Lease {
		t.Helper()
		l, err := o.Lead(ctx, origin.LeaseRequest{Holder: holder, TTL: ttl, Regions: 3, Cursors: cursors})
		if err != nil {
			t.Fatalf("Lead(%s): %v", holder, err)
		}
		return l
	}
	first := lead(a, origin.Cursors{})
	if !first.Held || first.Holder != a {
		t.Fatalf("a takes a free lease: %+v", first)
	}
	if l := lead(b, origin.Cursors{Counts: 99}); l.Held || l.Holder != a || l.Fence != first.Fence {
		t.Fatalf("b asks while a holds it: %+v, want a's lease, not held", l)
	}
	renewed := lead(a, origin.Cursors{Counts: 7, Denials: 8})
	if !renewed.Held || renewed.Fence != first.Fence || renewed.Cursors != (origin.Cursors{Counts: 7, Denials: 8}) || renewed.Regions != 3 {
		t.Fatalf("a renews and stores its cursors: %+v", renewed)
	}
	if l := lead(b, origin.Cursors{}); l.Held || l.Cursors != renewed.Cursors {
		t.Fatalf("b reads the state a stored: %+v", l)
	}
	lapse()
	taken := lead(b, origin.Cursors{Counts: 1})
	if !taken.Held || taken.Holder != b || taken.Fence <= first.Fence || taken.Cursors != renewed.Cursors {
		t.Fatalf("b takes the lapsed lease: %+v, want held, a higher fence than %d and a's cursors", taken, first.Fence)
	}
	if l := lead(a, origin.Cursors{Counts: 100}); l.Held || l.Holder != b {
		t.Fatalf("a, which lost the lease, asks again: %+v, want b's", l)
	}
	if l := lead(b, origin.Cursors{Counts: 2}); !l.Held || l.Cursors.Counts != 2 || l.Fence != taken.Fence {
		t.Fatalf("b renews: %+v", l)
	}
}

func nominationCases(t *testing.T, o RegionOrigin) {
	ctx := context.Background()
	// Drain what earlier runs left, so that the queue holds this run's only.
	for {
		left, err := o.Nominated(ctx, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
	}
	odd := origin.Key{Workspace: "w:{}\x00", Namespace: "n:1:", Identifier: "\xff\xfe:3:", Duration: time.Minute}
	ns := []origin.Nomination{
		{Cell: origin.Cell{Key: odd, Sequence: 5}, Count: 40, Limit: 100},
		{Cell: origin.Cell{Key: odd, Sequence: -2}, Limit: 100, Usage: 95},
		{Cell: origin.Cell{Key: origin.Key{Identifier: "plain", Duration: 1500 * time.Millisecond}, Sequence: 1 << 40}, Count: 1, Limit: 2},
	}
	if err := o.Nominate(ctx, ns[:2]); err != nil {
		t.Fatal(err)
	}
	if err := o.Nominate(ctx, ns[2:]); err != nil {
		t.Fatal(err)
	}
	got, err := o.Nominated(ctx, 2)
	if err != nil || len(got) != 2 || got[0] != ns[0] || got[1] != ns[1] {
		t.Fatalf("Nominated(2) = %+v, %v; want the first two, as nominated", got, err)
	}
	got, err = o.Nominated(ctx, 10)
	if err != nil || len(got) != 1 || got[0] != ns[2] {
		t.Fatalf("Nominated(10) = %+v, %v; want the last one", got, err)
	}
	if got, err = o.Nominated(ctx, 10); err != nil || len(got) != 0 {
		t.Fatalf("Nominated of an empty queue = %+v, %v", got, err)
	}
}

// rc returns the region counts of pairs of a region and a count.
func rc(pairs ...any) []origin.RegionCount {
	var out []origin.RegionCount
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, origin.RegionCount{Region: pairs[i].(string), Count: int64(pairs[i+1].(int))})
	}
	return out
}

func importCases(t *testing.T, o RegionOrigin) {
	ctx := context.Background()
	key := origin.Key{Workspace: fmt.Sprintf("imports-%d", time.Now().UnixNano()), Namespace: "n", Identifier: "i", Duration: time.Minute}
	seq := time.Now().UnixMilli() / time.Minute.Milliseconds()
	cur, prev := origin.Cell{Key: key, Sequence: seq}, origin.Cell{Key: key, Sequence: seq - 1}
	steps := []struct {
		name    string
		imports []origin.Import
		apply   int64 // sent by one writer to cur, before the imports
		want    origin.Counts
	}{
		{"an import creates the cells", []origin.Import{{Cell: cur, Counts: rc("eu", 5)}, {Cell: prev, Counts: rc("eu", 4, "us", 5)}}, 0,
			origin.Counts{Imported: origin.Imported{Current: 5, Previous: 9}}},
		{"an entry never lowered", []origin.Import{{Cell: cur, Counts: rc("eu", 3)}}, 0,
			origin.Counts{Imported: origin.Imported{Current: 5, Previous: 9}}},
		{"apart from the total", []origin.Import{{Cell: cur, Counts: rc("eu", 6)}}, 10,
			origin.Counts{Current: 10, Previous: 0, Imported: origin.Imported{Current: 6, Previous: 9}}},
		{"regions add up", []origin.Import{{Cell: cur, Counts: rc("us", 2)}}, 0,
			origin.Counts{Current: 10, Imported: origin.Imported{Current: 8, Previous: 9}}},
		{"an entry again changes nothing", []origin.Import{{Cell: cur, Counts: rc("us", 2, "eu", 6)}}, 0,
			origin.Counts{Current: 10, Imported: origin.Imported{Current: 8, Previous: 9}}},
		{"a denial's usage counts the region's own count once", []origin.Import{{Cell: cur, Usage: 30}}, 0,
			origin.Counts{Current: 10, Imported: origin.Imported{Current: 20, Previous: 9}}},
		{"entries below a denial's usage leave it", []origin.Import{{Cell: cur, Counts: rc("eu", 9)}}, 0,
			origin.Counts{Current: 10, Imported: origin.Imported{Current: 20, Previous: 9}}},
	}
	w := origin.Writer(time.Now().UnixNano() | 1)
	for _, s := range steps {
		if s.apply > 0 {
			totals, err := o.Apply(ctx, []origin.Delta{{Cell: cur, Writer: w, Sent: s.apply}})
			if err != nil || totals[0].Count != s.apply {
				t.Fatalf("%s: Apply = %+v, %v", s.name, totals, err)
			}
		}
		if err := o.Import(ctx, s.imports); err != nil {
			t.Fatalf("%s: Import: %v", s.name, err)
		}
		got, err := o.Load(ctx, key, seq)
		if err != nil || got != s.want {
			t.Fatalf("%s: Load = %+v, %v; want %+v", s.name, got, err, s.want)
		}
	}
	totals, err := o.Apply(ctx, []origin.Delta{{Cell: cur, Writer: w, Sent: 11}})
	if err != nil || totals[0] != (origin.Total{Count: 11, Imported: 20}) {
		t.Fatalf("Apply carries the imported count: %+v, %v; want {11 20}", totals, err)
	}
	v, err := o.Decide(ctx, origin.Check{Key: key, Seq: seq, Writer: w, Sent: 11, Asks: []origin.Ask{{Limit: 100, Cost: 1}}})
	if err != nil || v.Counts.Imported != (origin.Imported{Current: 20, Previous: 9}) {
		t.Fatalf("Decide carries the imported counts: %+v, %v", v, err)
	}
}

// StoredRegionOrigin is a RegionOrigin whose leader can import cells it
// knows without the origin reading them.
type StoredRegionOrigin interface {
	RegionOrigin
	origin.StoredImporter
}

// StoredImports runs the cases of [origin.StoredImporter] against o: an
// importer that does not hold the lease imports nothing (origin.ErrFenced),
// before it took the lease and after another holder took it over; the
// holder's imports merge and, when reads is set, return what the origin
// stores of each cell (every region's entries summed, those the import
// named, the imported count); its known imports write what they carry,
// creating a cell they find missing; and Load reads it all back. lapse
// must return once a lease of ttl taken before the call has lapsed by o's
// clock. Each run uses holders and cells of its own.
func StoredImports(t *testing.T, o StoredRegionOrigin, reads bool, ttl time.Duration, lapse func()) {
	ctx := context.Background()
	run := time.Now().UnixNano()
	a, b := fmt.Sprintf("a-%d", run), fmt.Sprintf("b-%d", run)
	key := origin.Key{Workspace: fmt.Sprintf("stored-%d", run), Namespace: "n", Identifier: "i", Duration: time.Minute}
	seq := time.Now().UnixMilli() / time.Minute.Milliseconds()
	cur, next := origin.Cell{Key: key, Sequence: seq}, origin.Cell{Key: key, Sequence: seq + 1}
	importAs := func(holder string, imports ...origin.Import) ([]origin.Stored, error) {
		t.Helper()
		return o.ImportStored(ctx, holder, imports)
	}
	loaded := func(name string, s int64, want int64) {
		t.Helper()
		got, err := o.Load(ctx, key, s)
		if err != nil || got.Imported.Current != want {
			t.Fatalf("%s: Load = %+v, %v; want %d imported", name, got, err, want)
		}
	}
	if _, err := importAs(a, origin.Import{Cell: cur, Counts: rc("eu", 5)}); !errors.Is(err, origin.ErrFenced) || errors.Is(err, origin.ErrUnavailable) {
		t.Fatalf("an importer that never held the lease: %v, want origin.ErrFenced, not an outage", err)
	}
	loaded("nothing imported without the lease", seq, 0)
	if l, err := o.Lead(ctx, origin.LeaseRequest{Holder: a, TTL: ttl}); err != nil || !l.Held {
		t.Fatalf("Lead(a) = %+v, %v", l, err)
	}
	steps := []struct {
		name   string
		im     origin.Import
		want   origin.Stored // for an import the origin reads
		loaded int64
	}{
		{"a read import", origin.Import{Cell: cur, Counts: rc("eu", 5, "us", 2)},
			origin.Stored{Read: true, Counts: rc("eu", 5, "us", 2), Sum: 7, Imported: 7}, 7},
		{"a known import", origin.Import{Cell: cur, Counts: rc("eu", 8, "us", 2, "ap", 1), Known: true, Imported: 11},
			origin.Stored{}, 11},
		{"a read import after it", origin.Import{Cell: cur, Counts: rc("ap", 3)},
			origin.Stored{Read: true, Counts: rc("ap", 3), Sum: 13, Imported: 13}, 13},
		{"a known import of a missing cell", origin.Import{Cell: next, Counts: rc("eu", 4), Known: true, Imported: 4},
			origin.Stored{}, 4},
	}
	for _, s := range steps {
		got, err := importAs(a, s.im)
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: ImportStored = %+v, %v", s.name, got, err)
		}
		if reads && !reflect.DeepEqual(got[0], s.want) || !reads && got[0].Read {
			t.Fatalf("%s: stored %+v, want %+v", s.name, got[0], s.want)
		}
		loaded(s.name, s.im.Cell.Sequence, s.loaded)
	}
	lapse()
	if l, err := o.Lead(ctx, origin.LeaseRequest{Holder: b, TTL: ttl}); err != nil || !l.Held {
		t.Fatalf("Lead(b) = %+v, %v", l, err)
	}
	if _, err := importAs(a, origin.Import{Cell: cur, Counts: rc("eu", 1, "us", 1, "ap", 1), Known: true, Imported: 3}); !errors.Is(err, origin.ErrFenced) || errors.Is(err, origin.ErrUnavailable) {
		t.Fatalf("a, whose lease b took over: %v, want origin.ErrFenced, not an outage", err)
	}
	loaded("a deposed importer changed nothing", seq, 13)
}
