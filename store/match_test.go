package store_test

import (
	"sort"
	"testing"

	"github.com/sluicehq/sluice/store"
)

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
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := store.Match(tc.pattern, tc.id); got != tc.want {
				t.Fatalf("Match(%q, %q) = %v, want %v", tc.pattern, tc.id, got, tc.want)
			}
		})
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
