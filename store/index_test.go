package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// refLookup is the override a linear scan picks: every override is matched
// with a textbook glob, and the most specific match wins (MoreSpecific).
// It is the behaviour the index must keep.
func refLookup(os map[string]Override, id string) (Override, bool) {
	var best Override
	found := false
	for _, o := range os {
		if refGlob(o.Identifier, id) && (!found || MoreSpecific(o.Identifier, best.Identifier)) {
			best, found = o, true
		}
	}
	return best, found
}

// refGlob matches '*' globs by recursion: obviously right, exponential.
func refGlob(p, s string) bool {
	if p == "" {
		return s == ""
	}
	if p[0] == '*' {
		for i := 0; i <= len(s); i++ {
			if refGlob(p[1:], s[i:]) {
				return true
			}
		}
		return false
	}
	return s != "" && p[0] == s[0] && refGlob(p[1:], s[1:])
}

// TestIndexAgainstReference applies random sets and deletes to an index,
// copy on write, and checks after each that lookups agree with a linear
// scan, that an index rebuilt from scratch agrees too, and that the
// snapshot comparison (sameAs) holds for equal contents only.
func TestIndexAgainstReference(t *testing.T) {
	pattern := rapid.StringOfN(rapid.SampledFrom([]rune("ab*")), 1, 7, -1)
	ident := rapid.StringOfN(rapid.SampledFrom([]rune("ab")), 0, 130, -1) // up to three bitmap words
	defer func(m, l, b int) { maxStale, linearMax, bitmapWords = m, l, b }(maxStale, linearMax, bitmapWords)
	rapid.Check(t, func(t *rapid.T) {
		maxStale = rapid.IntRange(0, 6).Draw(t, "maxStale")
		linearMax = rapid.IntRange(0, 3).Draw(t, "linearMax")
		bitmapWords = rapid.SampledFrom([]int{0, 1, 3, 8192}).Draw(t, "bitmapWords") // below 8192, keys past the bound are searched
		var ix *overrideIndex
		ref := map[string]Override{}
		for step := range rapid.IntRange(1, 40).Draw(t, "steps") {
			p := pattern.Draw(t, "pattern")
			before, changed := ix, true
			if rapid.Bool().Draw(t, "delete") {
				next, ok := ix.without(p)
				_, had := ref[p]
				if ok != had {
					t.Fatalf("step %d: without(%q) reported %v, want %v", step, p, ok, had)
				}
				ix, changed = next, had
				delete(ref, p)
			} else {
				o := Override{ID: fmt.Sprintf("rlor_%d", step), Workspace: "ws", NamespaceID: "ns", Identifier: p, Limit: int64(step), Duration: time.Second}
				ix = ix.with(o)
				ref[p] = o
			}
			var all []Override
			for _, o := range ref {
				all = append(all, o)
			}
			if !ix.sameAs(all) || ix.len() != len(ref) {
				t.Fatalf("step %d: the index (%d) does not equal its contents (%d)", step, ix.len(), len(ref))
			}
			if changed && before.sameAs(all) {
				t.Fatalf("step %d: the index before the change equals the contents after it", step)
			}
			rebuilt := newOverrideIndex(all)
			for range 8 {
				id := ident.Draw(t, "identifier")
				want, wok := refLookup(ref, id)
				for name, x := range map[string]*overrideIndex{"updated": ix, "rebuilt": rebuilt} {
					got, gok := x.lookup(id)
					if gok != wok || got.ID != want.ID {
						t.Fatalf("step %d: %s index: lookup(%q) = %q (%v), want %q (%v)", step, name, id, got.Identifier, gok, want.Identifier, wok)
					}
				}
			}
		}
	})
}

// TestIndexPrecedence checks, through the index, the documented order of
// precedence across patterns that land in different prefix and suffix
// groups.
func TestIndexPrecedence(t *testing.T) {
	patterns := []string{"*", "user_*", "user_1", "*_1", "user_1*", "*er_1*", "u*1", "us*r*_1", "user_**", "*_12", "a*c", "ab*"}
	var os []Override
	for _, p := range patterns {
		os = append(os, Override{ID: p, Identifier: p})
	}
	ix := newOverrideIndex(os)
	for _, tc := range []struct{ name, id, want string }{
		{"exact beats every pattern", "user_1", "user_1"},
		{"more literal bytes win", "user_12", "user_1*"},
		{"fewer stars on equal literal bytes", "user_21", "user_*"},
		{"a pattern with two stars", "usXr_1", "us*r*_1"},
		{"suffix", "bob_1", "*_1"},
		{"prefix and suffix that meet", "u1", "u*1"},
		{"infix", "wher_1x", "*er_1*"},
		{"the star matches nothing", "user_", "user_*"},
		{"bytewise smaller on a tie", "abc", "a*c"},
		{"catch-all", "zzz", "*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := map[string]Override{}
			for _, o := range os {
				ref[o.Identifier] = o
			}
			if want, _ := refLookup(ref, tc.id); want.ID != tc.want {
				t.Fatalf("the reference picks %q: the case is wrong", want.ID)
			}
			if got, ok := ix.lookup(tc.id); !ok || got.ID != tc.want {
				t.Fatalf("lookup(%q) = %q, want %q", tc.id, got.ID, tc.want)
			}
		})
	}
}

// TestIndexLookupSkipsWhatCannotMatch counts the candidates a lookup
// examines: of 10,000 wildcards that each lack a piece the identifier has
// not (a literal prefix, suffix or run), none is; of 10,000 whose pieces
// all occur but out of place, each is, and none matches.
func TestIndexLookupSkipsWhatCannotMatch(t *testing.T) {
	a := strings.Repeat("a", 250)
	a512 := strings.Repeat("a", 512)
	for _, tc := range []struct {
		name    string
		pattern func(i int) string
		id      string
		want    int
	}{
		{"suffix", func(i int) string { return "*" + a + fmt.Sprintf("b%05d", i) }, a512, 0},
		{"prefix", func(i int) string { return a + fmt.Sprintf("b%05d", i) + "*" }, a512, 0},
		{"infix", func(i int) string { return "*" + a + fmt.Sprintf("b%05d", i) + "*" }, a512, 0},
		{"ends", func(i int) string { return "a*" + a + fmt.Sprintf("b%05d", i) + "*a" }, a512, 0},
		{"pairs", func(i int) string {
			return strings.Repeat("a", 1+i/100) + "*b*" + strings.Repeat("a", 1+i%100)
		}, a512, 0},
		{"runs", func(i int) string {
			return "a*" + strings.Repeat("a", 256+i%200) + "b" + strings.Repeat("a", 1+i/200) + "*a"
		}, strings.Repeat("a", 256) + "b" + strings.Repeat("a", 255), 50}, // k = 256: the run occurs, at 0, before the prefix ends
		{"order", func(i int) string {
			return "*" + strings.Repeat("a", 1+i/100) + "c*b" + strings.Repeat("a", 1+i%100) + "*"
		}, "b" + strings.Repeat("a", 510) + "c", 10_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var os []Override
			for i := range 10_000 {
				os = append(os, Override{Identifier: tc.pattern(i)})
			}
			ix := newOverrideIndex(os)
			examined := 0
			testHookPlace = func() { examined++ }
			defer func() { testHookPlace = nil }()
			if o, ok := ix.lookup(tc.id); ok {
				t.Fatalf("%q matched", o.Identifier)
			}
			if examined != tc.want {
				t.Fatalf("%d candidates examined, want %d", examined, tc.want)
			}
		})
	}
}

// TestCountsSurviveGenerationWrap runs lookups across the wrap of the
// generation that marks a pattern's piece counts: a count from an earlier
// lookup never makes a pattern a candidate of a later one, before, at or
// after the wrap.
func TestCountsSurviveGenerationWrap(t *testing.T) {
	var ws []*wildcard
	for _, p := range []string{"*ab*cd*", "*ab*ef*", "x*"} {
		w, ok := newWildcard(Override{Identifier: p})
		if !ok {
			t.Fatalf("%q is not a pattern", p)
		}
		ws = append(ws, w)
	}
	s := newWildSet(ws)
	x := s.getScratch()
	if s.lookupWith("ab", nil, x) != nil || x.gen != 1 {
		t.Fatalf("first lookup: generation %d, want 1", x.gen)
	}
	x.reset()
	x.gen = 1<<16 - 2 // the counts of "ab" carry generation 1, which comes back after the wrap
	for i, tc := range []struct {
		id    string
		cands int
	}{
		{"zz", 0}, {"zz", 0}, {"cd", 0}, {"ef", 0}, {"ab", 0}, {"abcd", 1}, {"ef", 0}, {"abef", 1}, {"cd", 0},
	} {
		if w := s.lookupWith(tc.id, nil, x); (w != nil) != (tc.cands > 0) {
			t.Fatalf("lookup %d (%q, generation %d): matched %v", i, tc.id, x.gen, w)
		}
		if len(x.cands) != tc.cands {
			t.Fatalf("lookup %d (%q, generation %d): %d candidates, want %d", i, tc.id, x.gen, len(x.cands), tc.cands)
		}
		x.reset()
	}
	if x.gen != 8 {
		t.Fatalf("generation %d after the wrap, want 8", x.gen)
	}
}

// BenchmarkIndexLookup measures one lookup in a namespace of 10,000
// overrides: an exact hit among exact identifiers, a hit among prefix
// patterns, and a miss among each adversarial shape of wildcards:
//
//	go test -run '^$' -bench IndexLookup ./store
func BenchmarkIndexLookup(b *testing.B) {
	a := strings.Repeat("a", 250)
	for _, tc := range []struct {
		name    string
		pattern func(i int) string
		id      string
	}{
		{"exact-hit", func(i int) string { return fmt.Sprintf("user_%05d", i) }, "user_04242"},
		{"prefix-hit", func(i int) string { return fmt.Sprintf("user_%05d*", i) }, "user_04242_x"},
		{"suffix-miss", func(i int) string { return "*" + a + fmt.Sprintf("b%05d", i) }, strings.Repeat("a", 512)},
		{"infix-miss", func(i int) string { return "*" + a + fmt.Sprintf("b%05d", i) + "*" }, strings.Repeat("a", 512)},
		{"runs-miss", func(i int) string {
			return "a*" + strings.Repeat("a", 256+i%200) + "b" + strings.Repeat("a", 1+i/200) + "*a"
		}, strings.Repeat("a", 256) + "b" + strings.Repeat("a", 255)},
		{"order-miss", func(i int) string {
			return "*" + strings.Repeat("a", 1+i/100) + "c*b" + strings.Repeat("a", 1+i%100) + "*"
		}, "b" + strings.Repeat("a", 510) + "c"},
		{"most-miss", func(i int) string { // 8 '*', the most the server accepts: 7 runs
			return "*" + strings.Repeat("a*", 5) + strings.Repeat("a", 1+i/100) + "c*b" + strings.Repeat("a", 1+i%100) + "*"
		}, "b" + strings.Repeat("a", 510) + "c"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var os []Override
			for i := range 10_000 {
				os = append(os, Override{Identifier: tc.pattern(i)})
			}
			ix := newOverrideIndex(os)
			b.ReportAllocs()
			for b.Loop() {
				ix.lookup(tc.id)
			}
		})
	}
}
