package memory

import (
	"context"
	mathrand "math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/origintest"
)

func TestStore(t *testing.T) {
	now := time.UnixMilli(10_000)
	s := New(func() time.Time { return now })
	ctx := context.Background()
	key := origin.Key{Namespace: "ns", Identifier: "u", Duration: time.Second}
	cell := func(seq int64) origin.Cell { return origin.Cell{Key: key, Sequence: seq} }

	steps := []struct {
		name   string
		deltas []origin.Delta
		want   []int64
		at     int64 // load cells at and before this sequence
		counts origin.Counts
	}{
		{"unknown cells count zero", nil, nil, 10, origin.Counts{}},
		{"totals accumulate in order", []origin.Delta{add(cell(10), 2), add(cell(10), 3), add(cell(9), 7)}, []int64{2, 5, 7}, 10, origin.Counts{Current: 5, Previous: 7}},
		{"other identities are apart", []origin.Delta{add(origin.Cell{Key: origin.Key{Namespace: "ns", Identifier: "v", Duration: time.Second}, Sequence: 10}, 1)}, []int64{1}, 10, origin.Counts{Current: 5, Previous: 7}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			got, err := s.Apply(ctx, st.deltas)
			if err != nil {
				t.Fatal(err)
			}
			for i := range st.want {
				if got[i].Count != st.want[i] {
					t.Fatalf("Apply totals = %v, want %v", got, st.want)
				}
			}
			counts, err := s.Load(ctx, key, st.at)
			if err != nil || counts != st.counts {
				t.Fatalf("Load = %+v, %v; want %+v", counts, err, st.counts)
			}
		})
	}

	// Cells expire three windows after their last increment.
	now = now.Add(3 * time.Second)
	if counts, _ := s.Load(ctx, key, 10); counts != (origin.Counts{}) {
		t.Fatalf("after three windows: %+v, want expired cells", counts)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Apply(canceled, []origin.Delta{add(cell(11), 1)}); err == nil {
		t.Fatal("Apply with a canceled context succeeded")
	}
}

// newWriter returns a writer of its own for a test: its first write of n
// adds n.
func newWriter() origin.Writer { return origin.Writer(mathrand.Uint64()) }

// add returns a delta that adds n to cell c: the first write of a new
// writer.
func add(c origin.Cell, n int64) origin.Delta {
	return origin.Delta{Cell: c, Writer: newWriter(), Sent: n}
}

func TestReservations(t *testing.T) { origintest.Reservations(t, New(nil)) }

func TestLoadMany(t *testing.T) { origintest.LoadMany(t, New(nil)) }

// TestRegion runs origintest's cases of origin.Region on a Store whose
// clock the test moves.
func TestRegion(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	s := New(func() time.Time { return now })
	origintest.Region(t, s, time.Second, func() { now = now.Add(time.Second) })
}

// TestStoredImports runs origintest's cases of origin.StoredImporter on a
// Store whose clock the test moves, from the present (the cases' cells
// are of the present minute).
func TestStoredImports(t *testing.T) {
	now := time.Now()
	s := New(func() time.Time { return now })
	origintest.StoredImports(t, s, true, time.Second, func() { now = now.Add(time.Second) })
}

// TestNominationsAreBounded fills a Store's queue past MaxNominations: the
// oldest are dropped, the newest kept.
func TestNominationsAreBounded(t *testing.T) {
	s := New(nil)
	ctx := context.Background()
	n := func(i int) origin.Nomination { return origin.Nomination{Count: int64(i)} }
	batch := make([]origin.Nomination, MaxNominations/4)
	for round := range 5 {
		for i := range batch {
			batch[i] = n(round*len(batch) + i)
		}
		if err := s.Nominate(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Nominated(ctx, 2*MaxNominations)
	if err != nil || len(got) != MaxNominations || got[0].Count != int64(len(batch)) {
		t.Fatalf("took %d, the first %+v; want %d from %d", len(got), got[0], MaxNominations, len(batch))
	}
}
