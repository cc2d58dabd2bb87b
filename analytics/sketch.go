package analytics

import (
	"cmp"
	"slices"
)

// SketchSize is k, the number of counters of one space-saving sketch. It
// fixes the error bound: a count is over the true count by at most N/k, N
// being the requests (or denials) of the namespace in the window.
const SketchSize = 64

// indexSlots is the size of a sketch's open-addressing index: twice
// SketchSize, a power of two, so that probes stay short.
const indexSlots = 2 * SketchSize

// sketch is a space-saving summary (Metwally, Agrawal, El Abbadi, 2005) of
// one stream of identifiers with SketchSize counters. Every identifier it
// holds has count ≥ its true count ≥ count − err; an identifier it does not
// hold has a true count ≤ the smallest count (0 while the sketch is not
// full), and the smallest count is at most total/SketchSize.
type sketch struct {
	n     int    // entries in use
	total uint64 // the length of the stream summarised
	// Once the sketch is full: the smallest count, how many entries have
	// it, and where the last search for one stopped. Counts only grow, so
	// the smallest is found again only when no entry has it any more: an
	// eviction costs O(1) amortised, not a scan of every counter.
	minCount uint64
	nMin     int
	cursor   int
	ids      [SketchSize]string
	hash     [SketchSize]uint64
	count    [SketchSize]uint64
	err      [SketchSize]uint64
	index    [indexSlots]uint8 // entry+1, or 0 for an empty slot
}

// reset empties s.
func (s *sketch) reset() { *s = sketch{} }

// find returns the index slot that holds the entry of id, or the empty slot
// where it would go, and whether it was found.
func (s *sketch) find(id string, h uint64) (int, bool) {
	for i := int(h) & (indexSlots - 1); ; i = (i + 1) & (indexSlots - 1) {
		e := s.index[i]
		if e == 0 {
			return i, false
		}
		if s.hash[e-1] == h && s.ids[e-1] == id {
			return i, true
		}
	}
}

// add counts c occurrences of id, whose hash is h.
func (s *sketch) add(id string, h uint64, c uint64) {
	s.total += c
	slot, ok := s.find(id, h)
	switch {
	case ok:
		e := int(s.index[slot] - 1)
		if s.n == SketchSize && s.count[e] == s.minCount {
			s.nMin--
		}
		s.count[e] += c
	case s.n < SketchSize:
		e := s.n
		s.n++
		s.ids[e], s.hash[e], s.count[e], s.err[e] = id, h, c, 0
		s.index[slot] = uint8(e + 1)
		if s.n == SketchSize {
			s.recountMin()
		}
		return
	default:
		e := s.takeMin()
		s.nMin--
		s.unindex(e)
		s.ids[e], s.hash[e] = id, h
		s.err[e] = s.count[e]
		s.count[e] += c
		slot, _ = s.find(id, h)
		s.index[slot] = uint8(e + 1)
	}
	if s.n == SketchSize && s.nMin == 0 {
		s.recountMin()
	}
}

// takeMin returns an entry of a full sketch whose count is the smallest,
// searching on from the last one found.
func (s *sketch) takeMin() int {
	for s.count[s.cursor] != s.minCount {
		s.cursor = (s.cursor + 1) % SketchSize
	}
	return s.cursor
}

// recountMin finds the smallest count of a full sketch and how many
// entries have it.
func (s *sketch) recountMin() {
	m, n := s.count[0], 0
	for _, c := range s.count {
		switch {
		case c < m:
			m, n = c, 1
		case c == m:
			n++
		}
	}
	s.minCount, s.nMin = m, n
}

// min is the smallest count of a full sketch, the most an identifier it
// does not hold can have occurred; 0 when the sketch is not full, since it
// then holds every identifier of its stream exactly.
func (s *sketch) min() uint64 {
	if s.n < SketchSize {
		return 0
	}
	return s.minCount
}

// unindex removes entry e from the index by backward-shift deletion, so
// that no probe sequence is broken.
func (s *sketch) unindex(e int) {
	i := int(s.hash[e]) & (indexSlots - 1)
	for int(s.index[i]) != e+1 {
		i = (i + 1) & (indexSlots - 1)
	}
	for {
		s.index[i] = 0
		j := i
		for {
			j = (j + 1) & (indexSlots - 1)
			if s.index[j] == 0 {
				return
			}
			home := int(s.hash[s.index[j]-1]) & (indexSlots - 1)
			// The entry at j may move to i unless its home lies cyclically
			// in (i, j].
			if (i < j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
				s.index[i] = s.index[j]
				i = j
				break
			}
		}
	}
}

// Heavy is one identifier of a top list: Count is an upper bound of its
// true count over the window and Count − Error a lower bound.
type Heavy struct {
	// Identifier is the request's identifier.
	Identifier string
	// Count is at least the true count, and at most Count − Error more.
	Count uint64
	// Error bounds the overestimate: the true count is in
	// [Count − Error, Count]. It is at most N/SketchSize, N being the
	// window's total.
	Error uint64
}

// Summary is one top-list bucket's sketch as nodes share it: what
// [Recorder.Changes] exports and [Recorder.ReportWith] merges.
type Summary struct {
	// Total is the number of decisions the sketch summarises.
	Total uint64
	// Min is the most an identifier the sketch does not list can have
	// occurred: its smallest count when full, else 0.
	Min uint64
	// Entries are the identifiers it holds, with their counts and errors.
	Entries []Heavy
}

// summary returns s as a Summary.
func (s *sketch) summary() Summary {
	out := Summary{Total: s.total, Min: s.min(), Entries: make([]Heavy, s.n)}
	for e := range s.n {
		out.Entries[e] = Heavy{Identifier: s.ids[e], Count: s.count[e], Error: s.err[e]}
	}
	return out
}

// merged is the merge of several sketches of consecutive parts of a stream
// (the buckets of a window): every identifier any of them holds, with the
// bounds of the whole stream, and the stream's total.
type merged struct {
	heavy []Heavy
	total uint64
}

// merge combines summaries of disjoint parts of one stream (Agarwal et
// al., "Mergeable summaries", 2012): the buckets of a window, of one node
// or of several. An identifier's count is the sum over the summaries of
// its count where held and of the summary's Min where not (an upper bound
// there), its error the sum of its errors where held and of Min where not.
// So count ≥ true ≥ count − error, and error ≤ Σ Min_i ≤ Σ N_i/k = N/k.
// Any identifier with a true count above N/k is held by at least one
// summary and so listed.
func merge(parts []Summary) merged {
	var out merged
	var mins uint64
	type acc struct{ over, under uint64 } // Σ (count_i − min_i), Σ (min_i − err_i)
	accs := map[string]*acc{}
	for _, s := range parts {
		out.total += s.Total
		m := s.Min
		mins += m
		for _, h := range s.Entries {
			a := accs[h.Identifier]
			if a == nil {
				a = &acc{}
				accs[h.Identifier] = a
			}
			// A summary from another node obeys the same rules; clamp what
			// would not, so that a bad one cannot wrap the sums around.
			a.over += max(h.Count, m) - m
			a.under += m - min(h.Error, m)
		}
	}
	out.heavy = make([]Heavy, 0, len(accs))
	for id, a := range accs {
		out.heavy = append(out.heavy, Heavy{Identifier: id, Count: mins + a.over, Error: mins - min(a.under, mins)})
	}
	slices.SortFunc(out.heavy, func(a, b Heavy) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Identifier, b.Identifier)
	})
	return out
}

// summaries returns the Summary of each sketch.
func summaries(ss []*sketch) []Summary {
	out := make([]Summary, len(ss))
	for i, s := range ss {
		out[i] = s.summary()
	}
	return out
}
