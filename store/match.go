package store

import (
	"strings"
)

// Match reports whether identifier matches pattern, in which each '*' stands
// for any run of bytes (including none) and every other byte matches itself.
// A pattern without '*' matches only the identical identifier. There is no
// escape: a '*' in a pattern is always a wildcard.
//
// Match takes time linear in len(pattern) + len(identifier) and does not
// allocate for patterns whose literal runs are at most 512 bytes long.
func Match(pattern, identifier string) bool {
	g, ok := compileGlob(pattern)
	if !ok {
		return pattern == identifier
	}
	return g.match(identifier)
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
	return moreSpecific(a, len(a)-sa, sa, b, len(b)-sb, sb)
}

// moreSpecific is MoreSpecific over precomputed literal byte and '*' counts.
func moreSpecific(a string, la, sa int, b string, lb, sb int) bool {
	if (sa == 0) != (sb == 0) {
		return sa == 0
	}
	if la != lb {
		return la > lb
	}
	if sa != sb {
		return sa < sb
	}
	return a < b
}

// glob is a wildcard pattern split at its first and its last '*'. An
// identifier matches when it starts with prefix, ends with suffix, has room
// for every literal byte, and the literal runs of middle appear, in order
// and without overlapping, between the prefix and the suffix.
type glob struct {
	pattern string
	prefix  string // the bytes before the first '*'
	suffix  string // the bytes after the last '*'
	middle  string // the bytes between them, '*' included; "" for one '*'
	literal int    // the non-'*' bytes of pattern
	stars   int    // the '*' of pattern
}

// compileGlob splits pattern; ok is false if it holds no '*'.
func compileGlob(pattern string) (g glob, ok bool) {
	first := strings.IndexByte(pattern, '*')
	if first < 0 {
		return glob{}, false
	}
	last := strings.LastIndexByte(pattern, '*')
	stars := strings.Count(pattern, "*")
	g = glob{
		pattern: pattern,
		prefix:  pattern[:first],
		suffix:  pattern[last+1:],
		literal: len(pattern) - stars,
		stars:   stars,
	}
	if first < last {
		g.middle = pattern[first+1 : last]
	}
	return g, true
}

// moreSpecific reports whether g takes precedence over h (see MoreSpecific).
func (g *glob) moreSpecific(h *glob) bool {
	return moreSpecific(g.pattern, g.literal, g.stars, h.pattern, h.literal, h.stars)
}

// match reports whether identifier matches g, in time linear in the lengths
// of both.
func (g *glob) match(identifier string) bool {
	if len(identifier) < g.literal || !strings.HasPrefix(identifier, g.prefix) || !strings.HasSuffix(identifier, g.suffix) {
		return false
	}
	return matchMiddle(g.middle, identifier[len(g.prefix):len(identifier)-len(g.suffix)])
}

// matchMiddle reports whether the literal runs of middle (split at '*')
// occur in text in order without overlapping. Placing each run at its
// leftmost occurrence after the previous one is enough: a later placement
// only leaves less text for the runs that follow. Every search starts where
// the previous one ended, so the whole costs O(len(middle) + len(text)).
func matchMiddle(middle, text string) bool {
	for middle != "" {
		var run string
		run, middle, _ = strings.Cut(middle, "*")
		if run == "" {
			continue
		}
		i := indexLinear(text, run)
		if i < 0 {
			return false
		}
		text = text[i+len(run):]
	}
	return true
}

// kmpStack is the longest run whose Knuth-Morris-Pratt table indexLinear
// keeps on the stack (API identifiers are at most 512 bytes).
const kmpStack = 512

// indexLinear is strings.Index with a worst case linear in len(s) +
// len(sep): strings.Index may compare sep at every position of s (its
// brute-force and Rabin-Karp paths), which adversarial inputs can make
// cost len(s) × len(sep). It uses Knuth-Morris-Pratt.
func indexLinear(s, sep string) int {
	switch {
	case len(sep) == 0:
		return 0
	case len(sep) == 1:
		return strings.IndexByte(s, sep[0])
	case len(sep) > len(s):
		return -1
	}
	var buf [kmpStack]int32
	var fail []int32
	if len(sep) <= kmpStack {
		fail = buf[:len(sep)]
	} else {
		fail = make([]int32, len(sep))
	}
	// fail[i] is the length of the longest proper border of sep[:i+1].
	for i, k := 1, int32(0); i < len(sep); i++ {
		for k > 0 && sep[i] != sep[k] {
			k = fail[k-1]
		}
		if sep[i] == sep[k] {
			k++
		}
		fail[i] = k
	}
	for i, k := 0, int32(0); i < len(s); i++ {
		for k > 0 && s[i] != sep[k] {
			k = fail[k-1]
		}
		if s[i] == sep[k] {
			k++
		}
		if int(k) == len(sep) {
			return i + 1 - len(sep)
		}
	}
	return -1
}
