package store

import "bytes"

// trie is a read-only trie over a set of distinct non-empty keys, laid out
// in flat slices: about 9 bytes a node, where a node is a distinct prefix
// of a key. Nodes are numbered breadth first from the root (0), so the
// edges of a node are contiguous and sorted by byte, and the edge numbered
// e leads to node e+1 (every node but the root is the end of exactly one
// edge, and edges are numbered in the order of the nodes they reach).
type trie struct {
	first []int32 // the edges of node i are label[first[i]:first[i+1]]
	label []byte  // the byte of each edge
	key   []int32 // the index of the key that ends at node i, or -1
}

// newTrie builds the trie of keys, which must be sorted and distinct; key
// i of keys is reported as i. It takes time linear in the keys' bytes.
func newTrie(keys []string) trie {
	type span struct{ lo, hi, depth int32 } // keys[lo:hi] share the node's depth bytes
	nodes := 1                              // at most: the root and one node per byte of the keys
	for _, k := range keys {
		nodes += len(k)
	}
	t := trie{first: make([]int32, 1, nodes+1), label: make([]byte, 0, nodes), key: make([]int32, 0, nodes)}
	queue := make([]span, 1, nodes)
	queue[0] = span{0, int32(len(keys)), 0}
	for q := 0; q < len(queue); q++ {
		s := queue[q]
		i, k := s.lo, int32(-1)
		if i < s.hi && len(keys[i]) == int(s.depth) {
			k, i = i, i+1 // a key that ends here sorts before those it prefixes
		}
		t.key = append(t.key, k)
		for i < s.hi {
			c, j := keys[i][s.depth], i+1
			for j < s.hi && keys[j][s.depth] == c {
				j++
			}
			t.label = append(t.label, c)
			queue = append(queue, span{i, j, s.depth + 1})
			i = j
		}
		t.first = append(t.first, int32(len(t.label)))
	}
	return t
}

// step returns the node reached from node n by byte c, or -1.
func (t *trie) step(n int32, c byte) int32 {
	lo := t.first[n]
	if i := bytes.IndexByte(t.label[lo:t.first[n+1]], c); i >= 0 {
		return lo + int32(i) + 1
	}
	return -1
}

// nodes returns how many nodes t has.
func (t *trie) nodes() int { return len(t.key) }

// automaton is an Aho-Corasick automaton over a trie's keys: one pass over
// a text finds every occurrence of every key, in time linear in the text
// plus the occurrences reported.
type automaton struct {
	trie
	fail   []int32    // the node of the longest proper suffix of node i's path that is in the trie
	out    []int32    // the nearest node on i's fail chain (i excluded) where a key ends, or -1
	keyLen []int32    // the length of each key
	root   [256]int32 // the state after reading each byte at the root
}

// newAutomaton builds the automaton of keys (sorted and distinct).
func newAutomaton(keys []string) automaton {
	a := automaton{trie: newTrie(keys)}
	n := a.nodes()
	a.fail, a.out = make([]int32, n), make([]int32, n)
	a.out[0] = -1
	for c := range a.root {
		a.root[c] = max(a.step(0, byte(c)), 0)
	}
	a.keyLen = make([]int32, len(keys))
	for i, k := range keys {
		a.keyLen[i] = int32(len(k))
	}
	// Breadth first, the fail chain of a node's parent is complete before
	// the node's own is computed: every node on it is shallower.
	for v := int32(0); int(v) < n; v++ {
		for e := a.first[v]; e < a.first[v+1]; e++ {
			u, c := e+1, a.label[e]
			a.fail[u] = 0
			if v != 0 {
				a.fail[u] = a.next(a.fail[v], c)
			}
			if f := a.fail[u]; a.key[f] >= 0 {
				a.out[u] = f
			} else {
				a.out[u] = a.out[f]
			}
		}
	}
	return a
}

// next returns the state after reading c in state s.
func (a *automaton) next(s int32, c byte) int32 {
	for ; s != 0; s = a.fail[s] {
		if g := a.step(s, c); g >= 0 {
			return g
		}
	}
	return a.root[c]
}

// occurrence is a key found in a text, and where it starts.
type occurrence struct{ key, start int32 }

// scan appends to occ every occurrence of a key in text, in the order in
// which they end (and, for one key, in the order in which they start).
func (a *automaton) scan(text string, occ []occurrence) []occurrence {
	if len(a.keyLen) == 0 {
		return occ
	}
	s := int32(0)
	for i := 0; i < len(text); i++ {
		s = a.next(s, text[i])
		n := s
		if a.key[n] < 0 {
			n = a.out[n]
		}
		for ; n > 0; n = a.out[n] {
			k := a.key[n]
			occ = append(occ, occurrence{k, int32(i+1) - a.keyLen[k]})
		}
	}
	return occ
}
