package store

import (
	"encoding/binary"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
)

// overrideIndex finds the override that applies to an identifier within one
// namespace:
//
//   - exact identifiers are found by hash;
//   - wildcard patterns are grouped by their literal prefix (the bytes
//     before the first '*') and, within a prefix, by their literal suffix
//     (the bytes after the last '*'). A lookup asks each map only for the
//     prefixes and suffixes the identifier actually has, one lookup per
//     distinct prefix or suffix length held, so patterns whose prefix or
//     suffix the identifier lacks are never looked at, however many there
//     are;
//   - a pattern whose prefix and suffix fit is then checked against the
//     identifier's bytes and byte pairs (signature) before its middle is
//     matched, in time linear in the lengths of both.
//
// Each group holds its patterns most specific first, so a lookup stops in a
// group at its first match and skips groups that cannot beat the best match
// so far. An index is immutable: with and without return a changed copy
// that shares what did not change, so readers never lock.
type overrideIndex struct {
	exact map[string]*Override // pointers, so that a copy on write copies 8 bytes an entry
	wild  wildIndex
	n     int    // overrides held
	sum   uint64 // the sum of their fingerprints (see sameAs)
}

// wildIndex holds the wildcard overrides of an index by literal prefix.
type wildIndex struct {
	byPrefix   map[string]*prefixGroup
	prefixLens []int // the distinct lengths of byPrefix's keys, longest first
}

// prefixGroup holds the wildcard overrides of one literal prefix by literal
// suffix; each bucket is sorted most specific first.
type prefixGroup struct {
	bySuffix   map[string][]*wildcard
	suffixLens []int // the distinct lengths of bySuffix's keys, longest first
}

// wildcard is a wildcard override with its compiled pattern.
type wildcard struct {
	glob
	o   Override
	sig signature // of the literal runs of the middle
}

func newWildcard(o Override) (*wildcard, bool) {
	g, ok := compileGlob(o.Identifier)
	if !ok {
		return nil, false
	}
	w := &wildcard{glob: g, o: o}
	w.sig.addRuns(g.middle)
	return w, true
}

// newOverrideIndex indexes the overrides of one namespace.
func newOverrideIndex(os []Override) *overrideIndex {
	ix := &overrideIndex{exact: make(map[string]*Override), wild: wildIndex{byPrefix: make(map[string]*prefixGroup)}}
	for _, o := range os {
		ix.n++
		ix.sum += fingerprint(o)
		w, ok := newWildcard(o)
		if !ok {
			ix.exact[o.Identifier] = &o
			continue
		}
		g := ix.wild.byPrefix[w.prefix]
		if g == nil {
			g = &prefixGroup{bySuffix: make(map[string][]*wildcard)}
			ix.wild.byPrefix[w.prefix] = g
		}
		g.bySuffix[w.suffix] = append(g.bySuffix[w.suffix], w)
	}
	for _, g := range ix.wild.byPrefix {
		for _, b := range g.bySuffix {
			sort.Slice(b, func(i, j int) bool { return b[i].moreSpecific(&b[j].glob) })
		}
		g.suffixLens = keyLens(g.bySuffix)
	}
	ix.wild.prefixLens = keyLens(ix.wild.byPrefix)
	return ix
}

// keyLens returns the distinct lengths of m's keys, longest first.
func keyLens[V any](m map[string]V) []int {
	var out []int
	for k := range m {
		out = append(out, len(k))
	}
	slices.Sort(out)
	out = slices.Compact(out)
	slices.Reverse(out)
	return out
}

// len returns how many overrides ix holds; a nil index holds none.
func (ix *overrideIndex) len() int {
	if ix == nil {
		return 0
	}
	return ix.n
}

// lookup returns the most specific override matching identifier.
func (ix *overrideIndex) lookup(identifier string) (Override, bool) {
	if ix == nil {
		return Override{}, false
	}
	if o, ok := ix.exact[identifier]; ok {
		return *o, true
	}
	if w := ix.wild.lookup(identifier); w != nil {
		return w.o, true
	}
	return Override{}, false
}

// lookup returns the most specific wildcard matching id, or nil.
func (x *wildIndex) lookup(id string) *wildcard {
	var best *wildcard
	var sig idSignature
	for _, lp := range x.prefixLens {
		if lp > len(id) {
			continue
		}
		g := x.byPrefix[id[:lp]]
		if g == nil {
			continue
		}
		for _, ls := range g.suffixLens {
			if lp+ls > len(id) {
				continue
			}
			for _, w := range g.bySuffix[id[len(id)-ls:]] {
				if best != nil && !w.moreSpecific(&best.glob) {
					break // the rest of the bucket is less specific still
				}
				if w.fits(id, &sig) {
					best = w
					break
				}
			}
		}
	}
	return best
}

// fits reports whether id, which starts with w's prefix and ends with its
// suffix without the two overlapping, matches w.
func (w *wildcard) fits(id string, sig *idSignature) bool {
	if len(id) < w.literal {
		return false
	}
	if w.literal == len(w.prefix)+len(w.suffix) {
		return true // the middle is only '*'
	}
	if !w.sig.within(sig.of(id)) {
		return false
	}
	testHookFullMatch()
	return matchMiddle(w.middle, id[len(w.prefix):len(id)-len(w.suffix)])
}

// testHookFullMatch is called before each full match of a wildcard's middle;
// tests count them.
var testHookFullMatch = func() {}

// get returns the override whose identifier (or pattern) is identifier.
func (ix *overrideIndex) get(identifier string) (Override, bool) {
	if ix == nil {
		return Override{}, false
	}
	if o, ok := ix.exact[identifier]; ok {
		return *o, true
	}
	g, ok := compileGlob(identifier)
	if !ok {
		return Override{}, false
	}
	b := ix.wild.bucket(&g)
	if i, found := position(b, &g); found {
		return b[i].o, true
	}
	return Override{}, false
}

// bucket returns the bucket that holds, or would hold, g.
func (x *wildIndex) bucket(g *glob) []*wildcard {
	if pg := x.byPrefix[g.prefix]; pg != nil {
		return pg.bySuffix[g.suffix]
	}
	return nil
}

// position returns where g is, or would be inserted, in the sorted bucket
// b, and whether it is there.
func position(b []*wildcard, g *glob) (int, bool) {
	i := sort.Search(len(b), func(i int) bool { return !b[i].moreSpecific(g) })
	return i, i < len(b) && b[i].pattern == g.pattern
}

// with returns a copy of ix (which may be nil) in which o is set, replacing
// the override of the same identifier if any.
func (ix *overrideIndex) with(o Override) *overrideIndex {
	next := ix.clone()
	if old, ok := ix.get(o.Identifier); ok {
		next.n--
		next.sum -= fingerprint(old)
	}
	next.n++
	next.sum += fingerprint(o)
	w, ok := newWildcard(o)
	if !ok {
		next.exact = maps.Clone(next.exact)
		if next.exact == nil {
			next.exact = make(map[string]*Override, 1)
		}
		next.exact[o.Identifier] = &o
		return next
	}
	b := next.wild.bucket(&w.glob)
	i, found := position(b, &w.glob)
	nb := make([]*wildcard, 0, len(b)+1)
	nb = append(nb, b[:i]...)
	nb = append(nb, w)
	if found {
		i++
	}
	nb = append(nb, b[i:]...)
	next.wild = next.wild.withBucket(w.prefix, w.suffix, nb)
	return next
}

// without returns a copy of ix without the override of identifier, and
// whether there was one; ix itself if there was none.
func (ix *overrideIndex) without(identifier string) (*overrideIndex, bool) {
	old, ok := ix.get(identifier)
	if !ok {
		return ix, false
	}
	next := ix.clone()
	next.n--
	next.sum -= fingerprint(old)
	g, wildcard := compileGlob(identifier)
	if !wildcard {
		next.exact = maps.Clone(next.exact)
		delete(next.exact, identifier)
		return next, true
	}
	b := next.wild.bucket(&g)
	i, _ := position(b, &g)
	nb := slices.Delete(slices.Clone(b), i, i+1)
	next.wild = next.wild.withBucket(g.prefix, g.suffix, nb)
	return next, true
}

// clone returns a shallow copy of ix, or an empty index for nil.
func (ix *overrideIndex) clone() *overrideIndex {
	if ix == nil {
		return &overrideIndex{}
	}
	next := *ix
	return &next
}

// withBucket returns a copy of x whose bucket (prefix, suffix) is b; an
// empty b removes the bucket, and its group when that was the last one.
func (x wildIndex) withBucket(prefix, suffix string, b []*wildcard) wildIndex {
	old := x.byPrefix[prefix]
	g := &prefixGroup{}
	if old != nil {
		g.bySuffix = maps.Clone(old.bySuffix)
		g.suffixLens = old.suffixLens
	} else {
		g.bySuffix = make(map[string][]*wildcard, 1)
	}
	_, had := g.bySuffix[suffix]
	if len(b) == 0 {
		delete(g.bySuffix, suffix)
	} else {
		g.bySuffix[suffix] = b
	}
	if had != (len(b) > 0) {
		g.suffixLens = keyLens(g.bySuffix)
	}
	next := wildIndex{byPrefix: maps.Clone(x.byPrefix), prefixLens: x.prefixLens}
	if next.byPrefix == nil {
		next.byPrefix = make(map[string]*prefixGroup, 1)
	}
	if len(g.bySuffix) == 0 {
		delete(next.byPrefix, prefix)
	} else {
		next.byPrefix[prefix] = g
	}
	if (old != nil) != (len(g.bySuffix) > 0) {
		next.prefixLens = keyLens(next.byPrefix)
	}
	return next
}

// sameAs reports whether ix holds exactly os (as a Snapshot returns them),
// so that a refresh need not rebuild it: same count and same sum of
// fingerprints. Fingerprints are keyed by a random seed, so different
// contents have equal sums with probability 2^-64 however they were chosen.
func (ix *overrideIndex) sameAs(os []Override) bool {
	if ix.len() != len(os) {
		return false
	}
	var sum uint64
	for _, o := range os {
		sum += fingerprint(o)
	}
	return ix == nil || sum == ix.sum
}

var fingerprintSeed = maphash.MakeSeed()

// fingerprint hashes every field of o that a lookup returns.
func fingerprint(o Override) uint64 {
	var h maphash.Hash
	h.SetSeed(fingerprintSeed)
	var b [8]byte
	for _, s := range [...]string{o.ID, o.Workspace, o.NamespaceID, o.Identifier} {
		binary.LittleEndian.PutUint64(b[:], uint64(len(s)))
		_, _ = h.Write(b[:])
		_, _ = h.WriteString(s)
	}
	for _, n := range [...]int64{o.Limit, int64(o.Duration), o.CreatedAt.UnixNano(), o.UpdatedAt.UnixNano()} {
		binary.LittleEndian.PutUint64(b[:], uint64(n))
		_, _ = h.Write(b[:])
	}
	return h.Sum64()
}

// signature is the set of bytes and of byte pairs (hashed to 256 bits) of
// some text. A run of bytes occurs in an identifier only if its signature
// is within the identifier's, so a failed check rules a pattern out in a
// few instructions, before its middle is matched.
type signature struct {
	bytes, pairs [4]uint64
}

// pairMul keys the hash of byte pairs, so that which pairs share a bit
// cannot be known in advance.
var pairMul = rand.Uint32() | 1

func (s *signature) add(text string) {
	for i := 0; i < len(text); i++ {
		c := text[i]
		s.bytes[c>>6] |= 1 << (c & 63)
		if i > 0 {
			p := uint8((uint32(text[i-1])<<8 | uint32(c)) * pairMul >> 24)
			s.pairs[p>>6] |= 1 << (p & 63)
		}
	}
}

// addRuns adds each literal run of a pattern's middle (split at '*').
func (s *signature) addRuns(middle string) {
	start := 0
	for i := 0; i <= len(middle); i++ {
		if i == len(middle) || middle[i] == '*' {
			s.add(middle[start:i])
			start = i + 1
		}
	}
}

// within reports whether every byte and pair of s is in t.
func (s *signature) within(t *signature) bool {
	var miss uint64
	for i := range s.bytes {
		miss |= s.bytes[i]&^t.bytes[i] | s.pairs[i]&^t.pairs[i]
	}
	return miss == 0
}

// idSignature is the signature of the identifier of one lookup, computed
// the first time a pattern needs it.
type idSignature struct {
	sig  signature
	done bool
}

func (l *idSignature) of(id string) *signature {
	if !l.done {
		l.sig.add(id)
		l.done = true
	}
	return &l.sig
}
