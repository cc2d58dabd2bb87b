package store_test

import (
	"sort"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/store"
)

// refMatch is the textbook dynamic program for '*' globs, quadratic and
// obviously right: the reference the fast matcher is checked against.
func refMatch(pattern, s string) bool {
	// m[j] reports whether pattern[:i] matches s[:j], for the current i.
	m := make([]bool, len(s)+1)
	m[0] = true
	for i := 0; i < len(pattern); i++ {
		next := make([]bool, len(s)+1)
		if pattern[i] == '*' {
			seen := false
			for j := range m {
				seen = seen || m[j]
				next[j] = seen
			}
		} else {
			for j := 1; j <= len(s); j++ {
				next[j] = m[j-1] && pattern[i] == s[j-1]
			}
		}
		m = next
	}
	return m[len(s)]
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		name, pattern, id string
		want              bool
	}{
		{"exact", "user_1", "user_1", true},
		{"exact differs", "user_1", "user_2", false},
		{"exact is case sensitive", "User", "user", false},
		{"star alone", "*", "anything", true},
		{"star matches empty", "user_*", "user_", true},
		{"prefix", "user_*", "user_42", true},
		{"prefix miss", "user_*", "admin_42", false},
		{"suffix", "*_admin", "bob_admin", true},
		{"suffix miss", "*_admin", "bob_admin2", false},
		{"infix", "*sus*", "a_suspicious_b", true},
		{"two stars in order", "a*b*c", "axxbyyc", true},
		{"two stars wrong order", "a*b*c", "acb", false},
		{"backtracking", "*ab", "aab", true},
		{"double star", "a**b", "ab", true},
		{"literal star in identifier", "a*", "a*", true},
		{"longer identifier", "abc", "abcd", false},
		{"utf-8", "ü*", "über", true},
		{"prefix and suffix may not overlap", "ab*ba", "aba", false},
		{"prefix and suffix meet", "ab*ba", "abba", true},
		{"one byte for two", "a*a", "a", false},
		{"middle between prefix and suffix only", "ab*b*ba", "abba", false},
		{"middle fits", "ab*b*ba", "abbba", true},
		{"runs do not overlap", "*aa*aa*", "aaa", false},
		{"runs side by side", "*aa*aa*", "aaaa", true},
		{"leftmost placement", "*ab*abc*", "xabcabc", true},
		{"periodic run", "*abab*", "aabababb", true},
		{"the adversarial shape", "*" + strings.Repeat("a", 250) + "b00001", strings.Repeat("a", 512), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := store.Match(tc.pattern, tc.id); got != tc.want {
				t.Fatalf("Match(%q, %q) = %v, want %v", tc.pattern, tc.id, got, tc.want)
			}
			if ref := refMatch(tc.pattern, tc.id); ref != tc.want {
				t.Fatalf("the reference says %v: the case is wrong", ref)
			}
		})
	}
}

// TestMatchAgainstReference compares Match with refMatch on random
// patterns and identifiers over a small alphabet, where near-misses,
// overlaps and periodic runs are common.
func TestMatchAgainstReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pattern := rapid.StringOfN(rapid.SampledFrom([]rune("ab*")), 0, 12, -1).Draw(t, "pattern")
		id := rapid.StringOfN(rapid.SampledFrom([]rune("ab")), 0, 16, -1).Draw(t, "identifier")
		if got, want := store.Match(pattern, id), refMatch(pattern, id); got != want {
			t.Fatalf("Match(%q, %q) = %v, want %v", pattern, id, got, want)
		}
	})
}

// TestMatchIsLinear matches patterns built to make a backtracking glob
// try every split, each about len(pattern) × len(identifier) steps: the
// 60,000 matches below took 3.5 s with backtracking (the glob before this
// test) and take about 60 ms in linear time.
func TestMatchIsLinear(t *testing.T) {
	a := strings.Repeat("a", 512)
	patterns := []string{
		"*" + strings.Repeat("a", 250) + "b",
		"*" + strings.Repeat("a", 250) + "b*",
		"a*" + strings.Repeat("a", 300) + "b" + "*a",
	}
	start := time.Now()
	for range 20_000 {
		for _, p := range patterns {
			if store.Match(p, a) {
				t.Fatalf("%q matched", p)
			}
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("60,000 adversarial matches took %v", d)
	}
}

func TestMoreSpecificOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want []string
	}{
		{"exact first", []string{"*", "user_*", "user_1"}, []string{"user_1", "user_*", "*"}},
		{"longer literal wins", []string{"u*", "user_*"}, []string{"user_*", "u*"}},
		{"fewer stars on equal literal", []string{"a*b*", "ab*"}, []string{"ab*", "a*b*"}},
		{"lexical last", []string{"b*", "a*"}, []string{"a*", "b*"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := append([]string(nil), tc.in...)
			sort.Slice(got, func(i, j int) bool { return store.MoreSpecific(got[i], got[j]) })
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("order %v, want %v", got, tc.want)
				}
			}
		})
	}
}
