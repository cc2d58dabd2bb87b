package store

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkWildSetBuild measures building the wildSet of 10,000 wildcard
// patterns: short ones ("user_%05d_*") and 512-byte ones that share little
// (each a distinct run of 500 bytes), the longest the API accepts. An
// index rebuilds its wildSet once every maxStale writes to its wildcards.
//
//	go test -run '^$' -bench WildSetBuild -benchmem ./store
func BenchmarkWildSetBuild(b *testing.B) {
	for _, tc := range []struct {
		name    string
		pattern func(i int) string
	}{
		{"short", func(i int) string { return fmt.Sprintf("user_%05d_*", i) }},
		{"long", func(i int) string {
			return "*" + strings.Repeat(fmt.Sprintf("%05d", i), 100) + "*"
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ws := make([]*wildcard, 0, 10_000)
			for i := range 10_000 {
				w, _ := newWildcard(Override{Identifier: tc.pattern(i)})
				ws = append(ws, w)
			}
			b.ReportAllocs()
			for b.Loop() {
				newWildSet(ws)
			}
		})
	}
}
