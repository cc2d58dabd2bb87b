package analytics

import (
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

var testSeed = maphash.MakeSeed()

func addAll(s *sketch, ids ...string) {
	for _, id := range ids {
		s.add(id, maphash.String(testSeed, id), 1)
	}
}

func TestSketchExactBelowK(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream []string
		want   map[string]uint64
	}{
		{"empty", nil, map[string]uint64{}},
		{"one", []string{"a"}, map[string]uint64{"a": 1}},
		{"repeats", []string{"a", "b", "a", "c", "a", "b"}, map[string]uint64{"a": 3, "b": 2, "c": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s sketch
			addAll(&s, tc.stream...)
			m := merge(summaries([]*sketch{&s}))
			if len(m.heavy) != len(tc.want) || m.total != uint64(len(tc.stream)) {
				t.Fatalf("got %v (total %d), want %v", m.heavy, m.total, tc.want)
			}
			for _, h := range m.heavy {
				if h.Count != tc.want[h.Identifier] || h.Error != 0 {
					t.Errorf("%s: count %d error %d, want %d exactly", h.Identifier, h.Count, h.Error, tc.want[h.Identifier])
				}
			}
		})
	}
}

// TestSketchOrder checks the order of a merged list: by count, then by
// identifier.
func TestSketchOrder(t *testing.T) {
	var s sketch
	addAll(&s, "b", "a", "c", "c")
	m := merge(summaries([]*sketch{&s}))
	got := []string{m.heavy[0].Identifier, m.heavy[1].Identifier, m.heavy[2].Identifier}
	if got[0] != "c" || got[1] != "a" || got[2] != "b" {
		t.Fatalf("order %v, want [c a b]", got)
	}
}

// TestSketchBounds is the sketch's contract on arbitrary streams split in
// arbitrary buckets: every candidate's count bounds its true count from
// above and count − error from below, error ≤ N/k, and every identifier
// above N/k is a candidate. The index finds every entry after any number
// of evictions.
func TestSketchBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alphabet := rapid.IntRange(1, 400).Draw(t, "alphabet")
		skew := rapid.Float64Range(1.01, 3).Draw(t, "skew")
		buckets := rapid.IntRange(1, 7).Draw(t, "buckets")
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 0))
		z := rand.NewZipf(rng, skew, 1, uint64(alphabet-1))
		parts := make([]*sketch, buckets)
		exact := map[string]uint64{}
		var n uint64
		for i := range parts {
			parts[i] = new(sketch)
			for range rapid.IntRange(0, 3000).Draw(t, "length"+strconv.Itoa(i)) {
				x := z.Uint64() // mostly skewed, sometimes uniform
				if rng.IntN(3) == 0 {
					x = rng.Uint64N(uint64(alphabet))
				}
				id := "id" + strconv.FormatUint(x, 10)
				addAll(parts[i], id)
				exact[id]++
				n++
			}
			checkIndex(t, parts[i])
		}
		m := merge(summaries(parts))
		if m.total != n {
			t.Fatalf("total %d, want %d", m.total, n)
		}
		listed := map[string]bool{}
		for _, h := range m.heavy {
			listed[h.Identifier] = true
			f := exact[h.Identifier]
			if h.Count < f || h.Count-h.Error > f || h.Error*SketchSize > n {
				t.Fatalf("%s: true %d, count %d, error %d, N %d", h.Identifier, f, h.Count, h.Error, n)
			}
		}
		for id, f := range exact {
			if f*SketchSize > n && !listed[id] {
				t.Fatalf("%s: true count %d > N/k (N %d) but not a candidate", id, f, n)
			}
		}
	})
}

// checkIndex checks that the index holds exactly the sketch's entries, each
// found from its hash.
func checkIndex(t interface{ Fatalf(string, ...any) }, s *sketch) {
	used := 0
	for _, e := range s.index {
		if e != 0 {
			used++
		}
	}
	if used != s.n {
		t.Fatalf("index holds %d entries, sketch %d", used, s.n)
	}
	if s.n == SketchSize {
		m, n := s.count[0], 0
		for _, c := range s.count {
			if c < m {
				m, n = c, 0
			}
			if c == m {
				n++
			}
		}
		if s.minCount != m || s.nMin != n {
			t.Fatalf("smallest count %d held by %d, sketch says %d held by %d", m, n, s.minCount, s.nMin)
		}
	}
	for e := range s.n {
		slot, ok := s.find(s.ids[e], s.hash[e])
		if !ok || int(s.index[slot]) != e+1 {
			t.Fatalf("entry %d (%s) not found through the index", e, s.ids[e])
		}
	}
}

// zipfStream returns n identifiers drawn from a Zipf law (s=1.1) over
// 10,000 identifiers, with a fixed seed.
func zipfStream(n int) []string {
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 9999)
	out := make([]string, n)
	for i := range out {
		out[i] = "user-" + strconv.FormatUint(z.Uint64(), 10)
	}
	return out
}
