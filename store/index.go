package store

import (
	"encoding/binary"
	"hash/maphash"
	"maps"
	"slices"
	"strings"
)

// overrideIndex finds the override that applies to an identifier within one
// namespace: exact identifiers by hash, wildcard patterns through a
// wildSet, which never looks at a pattern the identifier cannot match
// (see wildSet for the cost of a lookup).
//
// An index is immutable: with and without return a changed copy, so
// readers never lock. Rebuilding the wildSet on every write would cost a
// write time linear in all the namespace's patterns, so a write leaves the
// wildSet as it is and notes the change beside it: patterns set since it was
// built (fresh, matched one by one) and patterns it holds that were since
// replaced or deleted (gone, skipped). The fresh patterns have a small
// wildSet of their own, rebuilt by each write. When maxStale changes have
// piled up, the next write rebuilds the main wildSet, so a write costs on
// average a maxStale-th of a rebuild plus the rebuild of at most maxStale
// fresh patterns, and a lookup walks two wildSets.
type overrideIndex struct {
	exact  map[string]*Override // pointers, so that a copy on write copies 8 bytes an entry
	wild   map[string]*wildcard // every wildcard held, by pattern
	set    *wildSet             // the wildcards held when it was built, or nil
	fresh  []*wildcard          // wildcards set since set was built
	fresh2 *wildSet             // the wildSet of fresh, when it holds more than linearMax
	gone   map[string]struct{}  // patterns of set replaced or deleted since it was built
	n      int                  // overrides held
	sum    uint64               // the sum of their fingerprints (see sameAs)
}

// maxStale is how many changes to the wildcards an index takes before it
// rebuilds its wildSet (a variable so that tests can make it small).
var maxStale = 64

// linearMax is the most wildcards an index matches one by one rather than
// through a wildSet (a variable so that tests can make it small).
var linearMax = 16

// wildcard is a wildcard override with its compiled pattern.
type wildcard struct {
	glob
	o    Override
	runs []string // the non-empty literal runs of the middle, in order
}

func newWildcard(o Override) (*wildcard, bool) {
	g, ok := compileGlob(o.Identifier)
	if !ok {
		return nil, false
	}
	w := &wildcard{glob: g, o: o}
	for r := range strings.SplitSeq(g.middle, "*") {
		if r != "" {
			w.runs = append(w.runs, r)
		}
	}
	return w, true
}

// distinctRuns returns w's runs without repeats.
func (w *wildcard) distinctRuns() []string {
	if len(w.runs) < 2 {
		return w.runs
	}
	rs := slices.Clone(w.runs)
	slices.Sort(rs)
	return slices.Compact(rs)
}

// newOverrideIndex indexes the overrides of one namespace.
func newOverrideIndex(os []Override) *overrideIndex {
	ix := &overrideIndex{exact: make(map[string]*Override), wild: make(map[string]*wildcard)}
	for _, o := range os {
		ix.n++
		ix.sum += fingerprint(o)
		if w, ok := newWildcard(o); ok {
			ix.wild[o.Identifier] = w
		} else {
			ix.exact[o.Identifier] = &o
		}
	}
	ix.rebuild()
	return ix
}

// rebuild indexes every wildcard of ix in a new wildSet, or, when there
// are at most linearMax, leaves them all in fresh, where a lookup matches
// them one by one faster than it would walk a wildSet.
func (ix *overrideIndex) rebuild() {
	ws := slices.Collect(maps.Values(ix.wild))
	ix.set, ix.fresh, ix.fresh2, ix.gone = nil, nil, nil, nil
	if len(ws) <= linearMax {
		ix.fresh = ws
		return
	}
	ix.set = newWildSet(ws)
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
	var best *wildcard
	if ix.set != nil {
		best = ix.set.lookup(identifier, ix.gone)
	}
	if ix.fresh2 != nil {
		if w := ix.fresh2.lookup(identifier, nil); w != nil && (best == nil || w.moreSpecific(&best.glob)) {
			best = w
		}
		return best.override()
	}
	for _, w := range ix.fresh {
		if (best == nil || w.moreSpecific(&best.glob)) && w.match(identifier) {
			best = w
		}
	}
	return best.override()
}

// override returns w's override, and false for a nil w.
func (w *wildcard) override() (Override, bool) {
	if w == nil {
		return Override{}, false
	}
	return w.o, true
}

// get returns the override whose identifier (or pattern) is identifier.
func (ix *overrideIndex) get(identifier string) (Override, bool) {
	if ix == nil {
		return Override{}, false
	}
	if o, ok := ix.exact[identifier]; ok {
		return *o, true
	}
	if w, ok := ix.wild[identifier]; ok {
		return w.o, true
	}
	return Override{}, false
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
		next.exact = cloneOrMake(next.exact)
		next.exact[o.Identifier] = &o
		return next
	}
	next.wild = cloneOrMake(next.wild)
	next.wild[o.Identifier] = w
	next.stale(o.Identifier)
	next.fresh = append(next.fresh, w)
	next.settle()
	return next
}

// without returns a copy of ix without the override of identifier, and
// whether there was one; ix itself if there was none.
func (ix *overrideIndex) without(identifier string) (*overrideIndex, bool) {
	if _, ok := ix.get(identifier); !ok {
		return ix, false
	}
	next := ix.clone()
	old, _ := ix.get(identifier)
	next.n--
	next.sum -= fingerprint(old)
	if _, ok := next.exact[identifier]; ok {
		next.exact = maps.Clone(next.exact)
		delete(next.exact, identifier)
		return next, true
	}
	next.wild = maps.Clone(next.wild)
	delete(next.wild, identifier)
	next.stale(identifier)
	next.settle()
	return next, true
}

// stale notes that the wildcard pattern was replaced or deleted: a fresh
// copy leaves fresh, and the wildSet's copy is skipped from now on. It
// copies what it changes, which ix may share with the index it came from.
func (ix *overrideIndex) stale(pattern string) {
	ix.fresh = slices.DeleteFunc(slices.Clone(ix.fresh), func(w *wildcard) bool { return w.pattern == pattern })
	if ix.set != nil && ix.set.has(pattern) {
		ix.gone = cloneOrMake(ix.gone)
		ix.gone[pattern] = struct{}{}
	}
}

// settle rebuilds the wildSet once maxStale changes have piled up beside
// it, and else the wildSet of the fresh patterns.
func (ix *overrideIndex) settle() {
	if len(ix.fresh)+len(ix.gone) > max(maxStale, linearMax) {
		ix.rebuild()
		return
	}
	ix.fresh2 = nil
	if len(ix.fresh) > linearMax {
		ix.fresh2 = newWildSet(ix.fresh)
	}
}

// clone returns a shallow copy of ix, or an empty index for nil.
func (ix *overrideIndex) clone() *overrideIndex {
	if ix == nil {
		return &overrideIndex{}
	}
	next := *ix
	return &next
}

// cloneOrMake returns a copy of m, or a new map if m is nil.
func cloneOrMake[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return make(map[K]V, 1)
	}
	return maps.Clone(m)
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
