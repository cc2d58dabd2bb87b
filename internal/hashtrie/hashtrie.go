// Package hashtrie is a concurrent hash-trie map whose reads never lock.
//
// It holds the limiter's window cells. A lookup walks at most 16 levels of
// 16-way nodes with atomic loads only, so a warm counter is found without a
// mutex and without allocating. Inserts and deletes lock the one trie node
// they change; they happen when a counter is first seen or evicted, never on
// the warm path. Values live inline in their entry, so a value is never copied
// after it is created and pointers to it stay valid for as long as they are
// held, even after the entry is deleted from the map.
//
// The design follows the hash-trie of Go's internal/sync package; it differs in
// keeping values inline (one allocation per entry) and in taking the caller's
// precomputed hash, so a caller can derive several related hashes cheaply.
package hashtrie

import (
	"iter"
	"sync"
	"sync/atomic"
	"unsafe"
)

const (
	fanoutLog2 = 4
	fanout     = 1 << fanoutLog2
	fanoutMask = fanout - 1
	hashBits   = 64
)

// Map is a concurrent map from K to inline values of V. Every method takes the
// key's hash, which must be Hash(key) for the Hash function the map was created
// with. The zero Map is not usable; create one with [New]. A Map is safe for
// concurrent use by many goroutines.
type Map[K comparable, V any] struct {
	hash func(K) uint64
	root *indirect[K, V]
}

// New returns an empty map that uses hash to place keys. hash must be
// deterministic and should be seeded against collision attacks.
func New[K comparable, V any](hash func(K) uint64) *Map[K, V] {
	return &Map[K, V]{hash: hash, root: &indirect[K, V]{}}
}

// node is the header shared by indirect nodes and entries; a child pointer is
// converted to the concrete type according to isEntry.
type node[K comparable, V any] struct {
	isEntry bool
}

func (n *node[K, V]) entry() *entry[K, V] {
	return (*entry[K, V])(unsafe.Pointer(n))
}

func (n *node[K, V]) indirect() *indirect[K, V] {
	return (*indirect[K, V])(unsafe.Pointer(n))
}

// indirect is an inner node. It keeps no parent pointer (deletion records
// the path it walked instead), which keeps it in the 144-byte size class.
type indirect[K comparable, V any] struct {
	node[K, V] // must be first
	dead       atomic.Bool
	mu         sync.Mutex // guards writes to children and dead
	children   [fanout]atomic.Pointer[node[K, V]]
}

func (i *indirect[K, V]) empty() bool {
	for j := range i.children {
		if i.children[j].Load() != nil {
			return false
		}
	}
	return true
}

// entry holds one key and its value. Entries whose full hashes are equal form
// a chain through overflow.
type entry[K comparable, V any] struct {
	node[K, V] // must be first
	overflow   atomic.Pointer[entry[K, V]]
	key        K
	value      V
}

func (e *entry[K, V]) lookup(key *K) *entry[K, V] {
	for ; e != nil; e = e.overflow.Load() {
		if e.key == *key {
			return e
		}
	}
	return nil
}

// Load returns a pointer to the value of *key, or nil if it is absent. key
// is passed by pointer so that a large key is not copied on every call; it
// is only read.
func (m *Map[K, V]) Load(hash uint64, key *K) *V {
	i := m.root
	for shift := hashBits - fanoutLog2; shift >= 0; shift -= fanoutLog2 {
		n := i.children[(hash>>shift)&fanoutMask].Load()
		if n == nil {
			return nil
		}
		if n.isEntry {
			if e := n.entry().lookup(key); e != nil {
				return &e.value
			}
			return nil
		}
		i = n.indirect()
	}
	panic("hashtrie: ran out of hash bits")
}

// LoadOrStore returns a pointer to the value of *key (read, and copied
// into the map if it is stored). If the key is absent it
// inserts a new value, lets init prepare it before any other goroutine can see
// it, and reports loaded false. init runs with a trie node locked; it must be
// quick and must not use the map.
func (m *Map[K, V]) LoadOrStore(hash uint64, key *K, init func(*V)) (v *V, loaded bool) {
	if v := m.Load(hash, key); v != nil {
		return v, true
	}
	var (
		i     *indirect[K, V]
		shift int
		slot  *atomic.Pointer[node[K, V]]
		n     *node[K, V]
	)
	for {
		// Find the slot where key belongs, then lock its node and check that
		// nothing moved meanwhile.
		i, shift = m.root, hashBits
		found := false
		for shift > 0 {
			shift -= fanoutLog2
			slot = &i.children[(hash>>shift)&fanoutMask]
			n = slot.Load()
			if n == nil || n.isEntry {
				found = true
				break
			}
			i = n.indirect()
		}
		if !found {
			panic("hashtrie: ran out of hash bits")
		}
		i.mu.Lock()
		n = slot.Load()
		if (n == nil || n.isEntry) && !i.dead.Load() {
			break
		}
		i.mu.Unlock()
	}
	defer i.mu.Unlock()

	if n != nil {
		if e := n.entry().lookup(key); e != nil {
			return &e.value, true
		}
	}
	e := &entry[K, V]{node: node[K, V]{isEntry: true}, key: *key}
	if init != nil {
		init(&e.value)
	}
	if n == nil {
		slot.Store(&e.node)
		return &e.value, false
	}
	slot.Store(m.expand(n.entry(), e, hash, shift))
	return &e.value, false
}

// expand returns the node that replaces old in a slot at shift once e (whose
// hash is hash) joins it: a chain if both hashes are equal, otherwise new
// indirect nodes down to the first level where the hashes differ.
func (m *Map[K, V]) expand(old, e *entry[K, V], hash uint64, shift int) *node[K, V] {
	oldHash := m.hash(old.key)
	if oldHash == hash {
		e.overflow.Store(old)
		return &e.node
	}
	top := &indirect[K, V]{}
	for cur := top; ; {
		if shift == 0 {
			panic("hashtrie: ran out of hash bits")
		}
		shift -= fanoutLog2
		oi, ni := (oldHash>>shift)&fanoutMask, (hash>>shift)&fanoutMask
		if oi != ni {
			cur.children[oi].Store(&old.node)
			cur.children[ni].Store(&e.node)
			return &top.node
		}
		next := &indirect[K, V]{}
		cur.children[oi].Store(&next.node)
		cur = next
	}
}

// CompareAndDelete removes key if its value is v and reports whether it did.
// Trie nodes left empty are pruned, so the map's memory follows its size.
func (m *Map[K, V]) CompareAndDelete(hash uint64, key K, v *V) bool {
	var path [hashBits / fanoutLog2]*indirect[K, V] // the nodes above i
	for {
		i, shift, depth := m.root, hashBits, 0
		var slot *atomic.Pointer[node[K, V]]
		var n *node[K, V]
		for shift > 0 {
			shift -= fanoutLog2
			slot = &i.children[(hash>>shift)&fanoutMask]
			n = slot.Load()
			if n == nil {
				return false
			}
			if n.isEntry {
				break
			}
			path[depth] = i
			depth++
			i = n.indirect()
		}
		if n == nil || !n.isEntry {
			panic("hashtrie: ran out of hash bits")
		}
		if e := n.entry().lookup(&key); e == nil || &e.value != v {
			return false
		}

		i.mu.Lock()
		if i.dead.Load() || slot.Load() != n {
			i.mu.Unlock()
			continue // the trie changed under us; look again
		}
		head := n.entry()
		if e := head.lookup(&key); e == nil || &e.value != v {
			i.mu.Unlock()
			return false // deleted meanwhile
		}
		if &head.value == v {
			if next := head.overflow.Load(); next != nil {
				slot.Store(&next.node)
			} else {
				slot.Store(nil)
			}
		} else {
			prev := head
			for e := head.overflow.Load(); e != nil; prev, e = e, e.overflow.Load() {
				if &e.value == v {
					prev.overflow.Store(e.overflow.Load())
					break
				}
			}
		}
		// Prune indirect nodes that became empty, bottom up.
		for depth > 0 && i.empty() {
			depth--
			parent := path[depth]
			parent.mu.Lock()
			i.dead.Store(true)
			parent.children[(hash>>(shift+fanoutLog2))&fanoutMask].Store(nil)
			i.mu.Unlock()
			i, shift = parent, shift+fanoutLog2
		}
		i.mu.Unlock()
		return true
	}
}

// All yields every key and a pointer to its value. It sees a weakly consistent
// view: entries inserted or deleted during the iteration may or may not be
// yielded, and no entry is yielded twice.
func (m *Map[K, V]) All() iter.Seq2[K, *V] {
	return func(yield func(K, *V) bool) {
		m.root.all(yield)
	}
}

func (i *indirect[K, V]) all(yield func(K, *V) bool) bool {
	for j := range i.children {
		n := i.children[j].Load()
		if n == nil {
			continue
		}
		if !n.isEntry {
			if !n.indirect().all(yield) {
				return false
			}
			continue
		}
		for e := n.entry(); e != nil; e = e.overflow.Load() {
			if !yield(e.key, &e.value) {
				return false
			}
		}
	}
	return true
}

// KeyOf returns the key stored with v. v must be a pointer returned by this
// map's Load or LoadOrStore (the entry may have been deleted since).
func (m *Map[K, V]) KeyOf(v *V) K {
	var e entry[K, V]
	return (*entry[K, V])(unsafe.Add(unsafe.Pointer(v), -int(unsafe.Offsetof(e.value)))).key
}
