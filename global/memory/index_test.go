package memory_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/global/memory"
	"github.com/sluicehq/sluice/origin"
)

// scanStore is the reference the Store's indexes must agree with: its rows
// in maps, every read a pass over all of them.
type scanStore struct {
	version int64
	counts  map[origin.Cell]map[string]*scanRow
	regions map[string]int64
	denials map[origin.Cell]scanDenial
}

type scanRow struct{ count, expiresAt, version int64 }

type scanDenial struct {
	global.Denial
	version int64
}

func newScanStore() *scanStore {
	return &scanStore{counts: map[origin.Cell]map[string]*scanRow{}, regions: map[string]int64{}, denials: map[origin.Cell]scanDenial{}}
}

func (s *scanStore) publish(region string, counts []global.Count) {
	for _, c := range counts {
		rows := s.counts[c.Cell]
		if rows == nil {
			rows = map[string]*scanRow{}
			s.counts[c.Cell] = rows
		}
		r := rows[region]
		if r == nil {
			r = &scanRow{}
			rows[region] = r
		}
		r.expiresAt = max(r.expiresAt, c.ExpiresAt)
		if c.Count > r.count {
			s.version++
			r.count, r.version = c.Count, s.version
		}
	}
}

func (s *scanStore) pull(region string, cursor global.Cursor, now, activeFor int64) global.Pull {
	p := global.Pull{Next: global.Cursor(s.version)}
	for cell, rows := range s.counts {
		active := false
		for _, row := range rows {
			active = active || row.expiresAt > now
		}
		for r, row := range rows {
			if active && row.version > int64(cursor) {
				p.Entries = append(p.Entries, global.Entry{Cell: cell, Region: r, Count: row.count})
			}
		}
	}
	for r, seen := range s.regions {
		if seen > now-activeFor || r == region {
			p.Regions++
		}
	}
	if _, ok := s.regions[region]; !ok {
		p.Regions++
	}
	return p
}

func (s *scanStore) emit(ds []global.Denial) {
	for _, d := range ds {
		if _, ok := s.denials[d.Cell]; !ok {
			s.version++
			s.denials[d.Cell] = scanDenial{d, s.version}
		}
	}
}

func (s *scanStore) readDenials(region string, cursor global.Cursor, now int64) ([]global.Denial, global.Cursor) {
	var out []global.Denial
	for _, d := range s.denials {
		if d.version > int64(cursor) && d.ExpiresAt > now && d.Region != region {
			out = append(out, d.Denial)
		}
	}
	return out, global.Cursor(s.version)
}

func (s *scanStore) cleanup(now int64) int {
	n := 0
	for cell, rows := range s.counts {
		for r, row := range rows {
			if row.expiresAt <= now {
				delete(rows, r)
				n++
			}
		}
		if len(rows) == 0 {
			delete(s.counts, cell)
		}
	}
	for cell, d := range s.denials {
		if d.ExpiresAt <= now {
			delete(s.denials, cell)
			n++
		}
	}
	return n
}

func compareEntries(a, b global.Entry) int {
	return cmp.Or(strings.Compare(a.Cell.Identifier, b.Cell.Identifier), cmp.Compare(a.Cell.Sequence, b.Cell.Sequence),
		strings.Compare(a.Region, b.Region), cmp.Compare(a.Count, b.Count))
}

func compareDenials(a, b global.Denial) int {
	return cmp.Or(strings.Compare(a.Cell.Identifier, b.Cell.Identifier), cmp.Compare(a.Cell.Sequence, b.Cell.Sequence))
}

// checkPull pulls from s and from ref alike, fails t unless they answer the
// same, and returns the next cursor.
func checkPull(t *rapid.T, s *memory.Store, ref *scanStore, region string, from global.Cursor, now int64) global.Cursor {
	got, err := s.Pull(context.Background(), region, from, now, 3000)
	if err != nil {
		t.Fatal(err)
	}
	want := ref.pull(region, from, now, 3000)
	slices.SortFunc(got.Entries, compareEntries)
	slices.SortFunc(want.Entries, compareEntries)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Pull(%s, %d) at %d = %+v, a scan %+v", region, from, now, got, want)
	}
	return got.Next
}

// checkDenials reads the denials of s and of ref alike, fails t unless they
// answer the same, and returns the next cursor.
func checkDenials(t *rapid.T, s *memory.Store, ref *scanStore, region string, from global.Cursor, now int64) global.Cursor {
	got, next, err := s.Denials(context.Background(), region, from, now)
	if err != nil {
		t.Fatal(err)
	}
	want, wantNext := ref.readDenials(region, from, now)
	slices.SortFunc(got, compareDenials)
	slices.SortFunc(want, compareDenials)
	if fmt.Sprint(got, next) != fmt.Sprint(want, wantNext) {
		t.Fatalf("Denials(%s, %d) at %d = %v %d, a scan %v %d", region, from, now, got, next, want, wantNext)
	}
	return next
}

// TestStoreMatchesAScan: through random publications (raising, lowering,
// zero and repeated counts), announcements, pulls and denial reads from
// cursors old and new, denials and cleanups at moving times (some rows
// of a cell expiring after the others), the Store
// answers every read as a pass over all its rows does: the same entries
// and denials (in any order), regions, cursors and rows cleaned up.
func TestStoreMatchesAScan(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		s, ref := memory.New(), newScanStore()
		regions := []string{"a", "b", "c"}
		now := int64(1_000_000)
		var cursors []global.Cursor // every cursor a read returned
		cell := func(label string) origin.Cell {
			seq := rapid.Int64Range(now/1000-2, now/1000+1).Draw(t, label+"seq")
			return origin.Cell{Key: origin.Key{Namespace: "ns", Identifier: rapid.SampledFrom([]string{"x", "y", "z"}).Draw(t, label+"id"),
				Duration: time.Second}, Sequence: seq}
		}
		cursor := func() global.Cursor {
			if len(cursors) == 0 || rapid.Bool().Draw(t, "zero cursor") {
				return 0
			}
			return cursors[rapid.IntRange(0, len(cursors)-1).Draw(t, "cursor")]
		}
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			region := rapid.SampledFrom(regions).Draw(t, "region")
			switch rapid.IntRange(0, 6).Draw(t, "action") {
			case 0, 1:
				var counts []global.Count
				for range rapid.IntRange(0, 4).Draw(t, "counts") {
					c := cell("")
					expires := (c.Sequence+2)*1000 + rapid.SampledFrom([]int64{0, 0, 1000}).Draw(t, "later expiry")
					counts = append(counts, global.Count{Cell: c, Count: rapid.Int64Range(0, 6).Draw(t, "count"), ExpiresAt: expires})
				}
				if err := s.Publish(ctx, region, counts, now); err != nil {
					t.Fatal(err)
				}
				ref.publish(region, counts)
			case 2:
				if err := s.Announce(ctx, region, now); err != nil {
					t.Fatal(err)
				}
				ref.regions[region] = max(ref.regions[region], now)
			case 3:
				cursors = append(cursors, checkPull(t, s, ref, region, cursor(), now))
			case 4:
				var ds []global.Denial
				for range rapid.IntRange(1, 3).Draw(t, "denials") {
					c := cell("denial ")
					ds = append(ds, global.Denial{Cell: c, Limit: 1, Region: region, ExpiresAt: (c.Sequence + 2) * 1000})
				}
				if err := s.EmitDenials(ctx, ds); err != nil {
					t.Fatal(err)
				}
				ref.emit(ds)
			case 5:
				cursors = append(cursors, checkDenials(t, s, ref, region, cursor(), now))
			default:
				now += rapid.SampledFrom([]int64{0, 1, 500, 1000, 2500}).Draw(t, "ms")
				got, err := s.Cleanup(ctx, now, 1)
				if err != nil {
					t.Fatal(err)
				}
				if want := ref.cleanup(now); got != want {
					t.Fatalf("Cleanup at %d deleted %d rows, a scan %d", now, got, want)
				}
			}
		}
	})
}
