package store

import (
	"math/bits"
	"slices"
	"sort"
	"sync"
)

// wildSet finds the most specific of many wildcard patterns that matches
// an identifier, without looking at the patterns that cannot match.
//
// A pattern is made of pieces: its literal prefix (before the first '*'),
// its literal suffix (after the last '*') and the literal runs between
// them. A pattern can match only if the identifier starts with its prefix,
// ends with its suffix and contains each of its runs. A lookup finds all
// of these at once, whatever the number of patterns: the prefixes of the
// identifier by walking a trie of prefixes, its suffixes by walking a trie
// of reversed suffixes, and every occurrence of every run in one pass of an
// Aho-Corasick automaton. Each piece found counts towards the patterns that
// need it (postings); a pattern becomes a candidate when all of its
// distinct pieces have been found. Only candidates are checked, by placing
// their runs in order at their leftmost occurrences (a bitmap of each
// run's starts, or a binary search among them), which takes time linear in
// the number of runs.
//
// So a lookup costs the identifier's length, plus the occurrences of runs
// in it (at most len × distinct run lengths), plus one count per (pattern,
// piece found), plus the runs of the candidates. A pattern that lacks a
// piece costs at most its pieces that are found; one of pieces all found
// but out of order costs its runs. A wildSet is immutable.
type wildSet struct {
	pats   []*wildcard // most specific first; a pattern is its index here
	index  map[string]int32
	need   []uint16 // the distinct pieces of each pattern
	shape  []shape  // the lengths of each pattern, beside pats to spare a lookup its pointers
	runs   postings // the runs of each pattern, in order, by key of middle
	always []int32  // the patterns without pieces ("*", "**"), most specific first

	prefixes, suffixes trie      // keys: distinct prefixes; distinct suffixes reversed
	middle             automaton // keys: distinct runs
	byPrefix, bySuffix postings  // the patterns of each key
	byRun              postings

	scratch sync.Pool // of *wildScratch
}

// shape is what placing a pattern's runs needs besides the runs.
type shape struct{ literal, prefix, suffix int32 }

// postings is a list of int32 per key, stored flat.
type postings struct {
	start []int32 // the list of key k is list[start[k]:start[k+1]]
	list  []int32
}

func (p *postings) of(k int32) []int32 { return p.list[p.start[k]:p.start[k+1]] }

// newPostings builds postings of keys keys from lists, where lists(add)
// calls add(key, value) for every entry; entries keep their order.
func newPostings(keys int, lists func(add func(k, v int32))) postings {
	p := postings{start: make([]int32, keys+1)}
	lists(func(k, _ int32) { p.start[k+1]++ })
	for k := range keys {
		p.start[k+1] += p.start[k]
	}
	p.list = make([]int32, p.start[keys])
	fill := slices.Clone(p.start[:keys])
	lists(func(k, v int32) { p.list[fill[k]] = v; fill[k]++ })
	return p
}

// keySet numbers distinct strings in sorted order.
type keySet map[string]int32

func (ks keySet) add(s string) {
	if s != "" {
		ks[s] = 0
	}
}

// sorted numbers the keys in sorted order and returns them.
func (ks keySet) sorted() []string {
	keys := make([]string, 0, len(ks))
	for k := range ks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		ks[k] = int32(i)
	}
	return keys
}

// newWildSet indexes ws.
func newWildSet(ws []*wildcard) *wildSet {
	s := &wildSet{pats: slices.Clone(ws), index: make(map[string]int32, len(ws))}
	sort.Slice(s.pats, func(i, j int) bool { return s.pats[i].moreSpecific(&s.pats[j].glob) })
	prefixes, suffixes, runs := keySet{}, keySet{}, keySet{}
	for _, w := range s.pats {
		prefixes.add(w.prefix)
		suffixes.add(reverse(w.suffix))
		for _, r := range w.runs {
			runs.add(r)
		}
	}
	s.prefixes, s.suffixes = newTrie(prefixes.sorted()), newTrie(suffixes.sorted())
	s.middle = newAutomaton(runs.sorted())
	s.need, s.shape = make([]uint16, len(s.pats)), make([]shape, len(s.pats))
	for i, w := range s.pats {
		s.shape[i] = shape{int32(w.literal), int32(len(w.prefix)), int32(len(w.suffix))}
		s.index[w.pattern] = int32(i)
		s.need[i] = uint16(len(w.distinctRuns()))
		if w.prefix != "" {
			s.need[i]++
		}
		if w.suffix != "" {
			s.need[i]++
		}
		if s.need[i] == 0 {
			s.always = append(s.always, int32(i))
		}
	}
	s.byPrefix = newPostings(len(prefixes), func(add func(k, v int32)) {
		for i, w := range s.pats {
			if w.prefix != "" {
				add(prefixes[w.prefix], int32(i))
			}
		}
	})
	s.bySuffix = newPostings(len(suffixes), func(add func(k, v int32)) {
		for i, w := range s.pats {
			if w.suffix != "" {
				add(suffixes[reverse(w.suffix)], int32(i))
			}
		}
	})
	s.byRun = newPostings(len(runs), func(add func(k, v int32)) {
		for i, w := range s.pats {
			for _, r := range w.distinctRuns() {
				add(runs[r], int32(i))
			}
		}
	})
	s.runs = newPostings(len(s.pats), func(add func(k, v int32)) {
		for i, w := range s.pats {
			for _, r := range w.runs {
				add(int32(i), runs[r])
			}
		}
	})
	return s
}

// has reports whether s indexes the pattern.
func (s *wildSet) has(pattern string) bool {
	_, ok := s.index[pattern]
	return ok
}

// wildScratch is the working memory of one lookup, reused through a pool.
type wildScratch struct {
	count []uint32 // per pattern: the lookup that counted it last (gen) << 16 | the pieces it found
	gen   uint32   // this lookup's number, in 1..65535
	cands []int32  // the patterns whose every piece was found
	occ   []occurrence
	found []int32  // the run keys found
	first []int32  // per run key: where its starts begin in byKey, or -1 when not found
	end   []int32  // per run key: where its starts end in byKey
	byKey []int32  // the starts of the occurrences, grouped by key
	spans []span   // per run key: what placing it needs, in one place
	bits  []uint64 // bitmaps of starts, words per key each
	words int32    // the words of one bitmap: len(id)/64, rounded up
}

// span is what placing a run key needs: where it occurs first and last,
// its bitmap of starts, its length. Placing a run reads one span, so the
// four sit together.
type span struct {
	lo, hi int32 // its first and last start; both -1 when not found
	bitsAt int32 // where its bitmap of starts begins in bits, or -1
	n      int32 // its length
}

// bitmapWords bounds the words of bitmaps one lookup keeps (64 KiB): the
// starts of the first keys found are kept as bitmaps, so that finding the
// first start at or after a position takes a few word operations; the
// keys past the bound are searched among their starts. A variable so that
// tests can make the bound bite.
var bitmapWords = 8192

func (s *wildSet) getScratch() *wildScratch {
	if x, ok := s.scratch.Get().(*wildScratch); ok {
		return x
	}
	keys := len(s.middle.keyLen)
	x := &wildScratch{count: make([]uint32, len(s.pats)), gen: 1, first: make([]int32, keys), end: make([]int32, keys), spans: make([]span, keys)}
	for k := range x.first {
		x.first[k] = -1
		x.spans[k] = span{lo: -1, hi: -1, bitsAt: -1, n: s.middle.keyLen[k]}
	}
	return x
}

// putScratch readies x for the next lookup and returns it to the pool.
func (s *wildSet) putScratch(x *wildScratch) {
	x.reset()
	s.scratch.Put(x)
}

// reset clears what a lookup set in x: the counts by moving on to the
// next generation, the rest by hand.
func (x *wildScratch) reset() {
	if x.gen++; x.gen == 1<<16 { // the numbers wrap: forget what the old ones counted
		clear(x.count)
		x.gen = 1
	}
	for _, k := range x.found {
		x.first[k] = -1
		x.spans[k].lo, x.spans[k].hi, x.spans[k].bitsAt = -1, -1, -1
	}
	x.cands, x.occ, x.found, x.byKey, x.bits = x.cands[:0], x.occ[:0], x.found[:0], x.byKey[:0], x.bits[:0]
}

// lookup returns the most specific pattern of s that matches id, skipping
// those in skip (removed since s was built), or nil.
func (s *wildSet) lookup(id string, skip map[string]struct{}) *wildcard {
	x := s.getScratch()
	defer s.putScratch(x)
	return s.lookupWith(id, skip, x)
}

// lookupWith is lookup with working memory x.
func (s *wildSet) lookupWith(id string, skip map[string]struct{}, x *wildScratch) *wildcard {
	s.findPieces(id, x)
	best := int32(len(s.pats))
	for _, p := range s.always {
		if !skipped(skip, s.pats[p]) {
			best = p
			break
		}
	}
	for _, p := range x.cands {
		if p < best && s.placeRuns(p, id, x) && !skipped(skip, s.pats[p]) {
			best = p
		}
	}
	if best == int32(len(s.pats)) {
		return nil
	}
	return s.pats[best]
}

func skipped(skip map[string]struct{}, w *wildcard) bool {
	if len(skip) == 0 {
		return false
	}
	_, ok := skip[w.pattern]
	return ok
}

// findPieces finds the prefixes, suffixes and runs of id, counts them
// towards the patterns that need them, and leaves the candidates in
// x.cands and the runs' occurrences grouped by key in x.byKey.
func (s *wildSet) findPieces(id string, x *wildScratch) {
	n := int32(0)
	for i := 0; i < len(id) && n >= 0; i++ {
		if n = s.prefixes.step(n, id[i]); n >= 0 && s.prefixes.key[n] >= 0 {
			s.count(s.byPrefix.of(s.prefixes.key[n]), x)
		}
	}
	n = 0
	for i := len(id) - 1; i >= 0 && n >= 0; i-- {
		if n = s.suffixes.step(n, id[i]); n >= 0 && s.suffixes.key[n] >= 0 {
			s.count(s.bySuffix.of(s.suffixes.key[n]), x)
		}
	}
	x.occ = s.middle.scan(id, x.occ)
	s.groupOccurrences(x)
	x.makeBitmaps(len(id))
	for _, k := range x.found {
		s.count(s.byRun.of(k), x)
	}
}

// groupOccurrences sorts the occurrences by key (a counting sort, stable,
// so the starts of each key stay ascending): key k's starts are
// x.byKey[x.first[k]:x.end[k]].
func (s *wildSet) groupOccurrences(x *wildScratch) {
	for _, o := range x.occ {
		if x.first[o.key] < 0 {
			x.first[o.key], x.end[o.key] = 0, 0
			x.found = append(x.found, o.key)
		}
		x.end[o.key]++ // a count for now
	}
	at := int32(0)
	for _, k := range x.found {
		x.first[k], x.end[k], at = at, at, at+x.end[k]
	}
	x.byKey = slices.Grow(x.byKey[:0], len(x.occ))[:len(x.occ)]
	for _, o := range x.occ {
		x.byKey[x.end[o.key]] = o.start
		x.end[o.key]++
	}
	for _, k := range x.found {
		x.spans[k].lo, x.spans[k].hi = x.byKey[x.first[k]], x.byKey[x.end[k]-1]
	}
}

// count counts one piece found towards each of pats.
func (s *wildSet) count(pats []int32, x *wildScratch) {
	for _, p := range pats {
		c := x.count[p]
		if c>>16 != x.gen {
			c = x.gen << 16
		}
		c++
		x.count[p] = c
		if uint16(c) == s.need[p] {
			x.cands = append(x.cands, p)
		}
	}
}

// makeBitmaps keeps the starts of each key found as a bitmap too, in an
// identifier of n bytes, while the bitmaps stay within bitmapWords.
func (x *wildScratch) makeBitmaps(n int) {
	x.words = int32(n+63) / 64
	for _, k := range x.found {
		if len(x.bits)+int(x.words) > bitmapWords {
			return
		}
		x.spans[k].bitsAt = int32(len(x.bits))
		x.bits = slices.Grow(x.bits, int(x.words))
		bm := x.bits[len(x.bits) : len(x.bits)+int(x.words)]
		clear(bm)
		for _, start := range x.byKey[x.first[k]:x.end[k]] {
			bm[start>>6] |= 1 << (start & 63)
		}
		x.bits = x.bits[:len(x.bits)+int(x.words)]
	}
}

// laterStart returns the first start of run key k, whose span is sp, at
// or after pos, where sp.lo < pos <= sp.hi (so there is one), when the
// word of sp's bitmap that holds pos has none: it reads the next words,
// or, for a key found past bitmapWords, which has no bitmap, searches
// among its starts.
func (x *wildScratch) laterStart(k int32, sp *span, pos int32) int32 {
	if sp.bitsAt < 0 {
		starts := x.byKey[x.first[k]:x.end[k]]
		i, _ := slices.BinarySearch(starts, pos)
		return starts[i]
	}
	i := sp.bitsAt + pos>>6 + 1
	for x.bits[i] == 0 {
		i++
	}
	return (i-sp.bitsAt)<<6 + int32(bits.TrailingZeros64(x.bits[i]))
}

// placeRuns reports whether the runs of pattern p, whose prefix and suffix
// id has, fit in order between them: each at its leftmost occurrence after
// the previous one, which leaves the most room for those that follow. A
// run placed at or before its first start takes that; one placed past its
// last start fails; else the word of its bitmap that holds the position
// usually has the start, and laterStart finds it otherwise.
func (s *wildSet) placeRuns(p int32, id string, x *wildScratch) bool {
	if testHookPlace != nil {
		testHookPlace()
	}
	sh := &s.shape[p]
	if int32(len(id)) < sh.literal {
		return false
	}
	pos, end := sh.prefix, int32(len(id))-sh.suffix
	for _, k := range s.runs.of(p) {
		sp := &x.spans[k]
		start := sp.lo
		if pos > start {
			if pos > sp.hi {
				return false
			}
			start = -1
			if sp.bitsAt >= 0 {
				if w := x.bits[sp.bitsAt+pos>>6] &^ (1<<(pos&63) - 1); w != 0 {
					start = pos&^63 + int32(bits.TrailingZeros64(w))
				}
			}
			if start < 0 {
				start = x.laterStart(k, sp, pos)
			}
		}
		if pos = start + sp.n; pos > end {
			return false
		}
	}
	return true
}

// testHookPlace is called before the runs of a candidate are placed; tests
// count the candidates a lookup examines.
var testHookPlace func()

// reverse returns s with its bytes in reverse order.
func reverse(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}
