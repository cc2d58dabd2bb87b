package store

import (
	"sort"
	"strings"
)

// Match reports whether identifier matches pattern, in which each '*' stands
// for any run of bytes (including none) and every other byte matches itself.
// A pattern without '*' matches only the identical identifier. There is no
// escape: a '*' in a pattern is always a wildcard.
func Match(pattern, identifier string) bool {
	// Iterative glob with single-star backtracking: O(len(pattern) *
	// len(identifier)) at worst, no recursion, no allocation.
	p, s := 0, 0
	star, mark := -1, 0
	for s < len(identifier) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, s
			p++
		case p < len(pattern) && pattern[p] == identifier[s]:
			p++
			s++
		case star >= 0:
			p = star + 1
			mark++
			s = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// MoreSpecific reports whether pattern a takes precedence over pattern b when
// both match an identifier. The order is total and deterministic:
//
//  1. an exact identifier (no '*') beats any pattern;
//  2. more literal (non-'*') bytes win;
//  3. then fewer '*' win;
//  4. then the bytewise smaller pattern wins.
func MoreSpecific(a, b string) bool {
	sa, sb := strings.Count(a, "*"), strings.Count(b, "*")
	if (sa == 0) != (sb == 0) {
		return sa == 0
	}
	la, lb := len(a)-sa, len(b)-sb
	if la != lb {
		return la > lb
	}
	if sa != sb {
		return sa < sb
	}
	return a < b
}

// overrideIndex finds the override that applies to an identifier within one
// namespace. It is immutable once built.
type overrideIndex struct {
	exact    map[string]Override
	patterns []Override // sorted by MoreSpecific, most specific first
}

func newOverrideIndex(os []Override) *overrideIndex {
	ix := &overrideIndex{exact: make(map[string]Override)}
	for _, o := range os {
		if o.Wildcard() {
			ix.patterns = append(ix.patterns, o)
		} else {
			ix.exact[o.Identifier] = o
		}
	}
	sort.Slice(ix.patterns, func(i, j int) bool {
		return MoreSpecific(ix.patterns[i].Identifier, ix.patterns[j].Identifier)
	})
	return ix
}

// lookup returns the most specific override matching identifier.
func (ix *overrideIndex) lookup(identifier string) (Override, bool) {
	if o, ok := ix.exact[identifier]; ok {
		return o, true
	}
	for _, o := range ix.patterns {
		if Match(o.Identifier, identifier) {
			return o, true
		}
	}
	return Override{}, false
}
