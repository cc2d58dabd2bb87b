package store

import (
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestTrieFindsItsKeys checks that walking the trie from its root along a
// key reaches the node where that key, and no other, ends, and that a
// string that is not a key ends nowhere.
func TestTrieFindsItsKeys(t *testing.T) {
	keys := []string{"a", "ab", "abc", "b", "ba", "bab", "c"}
	tr := newTrie(keys)
	walk := func(s string) int32 {
		n := int32(0)
		for i := 0; i < len(s) && n >= 0; i++ {
			n = tr.step(n, s[i])
		}
		if n < 0 {
			return -1
		}
		return tr.key[n]
	}
	for _, tc := range []struct {
		name, s string
		want    int32
	}{
		{"first key", "a", 0},
		{"a key inside another", "ab", 1},
		{"longest", "abc", 2},
		{"last", "c", 6},
		{"a prefix of keys that is no key", "", -1},
		{"beyond every key", "abcd", -1},
		{"no edge", "bb", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := walk(tc.s); got != tc.want {
				t.Fatalf("walk(%q) = %d, want %d", tc.s, got, tc.want)
			}
		})
	}
	if tr.nodes() != 8 { // the root, a, ab, abc, b, ba, bab and c
		t.Fatalf("nodes = %d, want 8: one per distinct prefix", tr.nodes())
	}
}

// TestAutomatonAgainstReference checks that a scan reports exactly the
// occurrences strings.Index finds, key by key, in ascending order of start.
func TestAutomatonAgainstReference(t *testing.T) {
	word := rapid.StringOfN(rapid.SampledFrom([]rune("abc")), 1, 6, -1)
	rapid.Check(t, func(t *rapid.T) {
		keys := rapid.SliceOfNDistinct(word, 1, 12, func(s string) string { return s }).Draw(t, "keys")
		slices.Sort(keys)
		text := rapid.StringOfN(rapid.SampledFrom([]rune("abc")), 0, 40, -1).Draw(t, "text")
		a := newAutomaton(keys)
		got := map[int32][]int32{}
		for _, o := range a.scan(text, nil) {
			got[o.key] = append(got[o.key], o.start)
		}
		for k, key := range keys {
			var want []int32
			for i := 0; i+len(key) <= len(text); i++ {
				if strings.HasPrefix(text[i:], key) {
					want = append(want, int32(i))
				}
			}
			if !slices.Equal(got[int32(k)], want) {
				t.Fatalf("key %q in %q: starts %v, want %v", key, text, got[int32(k)], want)
			}
		}
	})
}
