// Package fairmap is a map bounded in entries and shared fairly by
// tenants. It holds the tables a cluster node keeps about window cells:
// the cells it owns (origin/memory) and the totals it remembers to seed
// their next owner (origin/cluster).
//
// # Fair eviction
//
// It follows the rule the limiter applies to its own cells (sluice's
// fair.go): a full map evicts only from the tenants holding the most, so
// the largest come down to one common level and a tenant within its fair
// share never loses an entry to another tenant's inserts. An insert into
// a full map (Max) first evicts one entry of the tenant holding the most
// entries, the inserting tenant counted with its new entry. That tenant
// holds at least Max divided by the tenants holding entries, more than the
// limiter's share (90% of Max divided by the tenants), so a tenant within
// that share is never the one to pay for another's insert. An insert of a
// tenant at MaxPerTenant first evicts one of its own entries, whatever the
// others hold. Unlike the limiter, which lets its table pass MaxCounters
// while every tenant is within MaxCountersPerWorkspace, the map never holds
// more than Max: the largest tenant pays even then.
//
// Within a tenant, entries seen once (inserted and never used since) go
// before entries in use, and entries in use go in least recently used
// order; among the candidates looked at, a dead entry goes first and an
// entry whose window is over before a current one (see [Age]).
//
// # Bounded work
//
// No operation walks the map, except All. Insert looks at most at
// 2×scanLimit candidates to evict, Sweep at the number of entries it is
// given, and the rest is O(1), plus O(log tenants) to keep the tenants
// ordered by size.
//
// A Map is not safe for concurrent use: its owner holds a lock around
// every call.
package fairmap

import (
	"container/heap"
	"iter"
)

// scanLimit is the number of entries of each of a tenant's two lists
// (seen once, in use) an eviction looks at, from the least recently used.
const scanLimit = 16

// Age is how much evicting an entry costs, as the map's owner judges it at
// an instant.
type Age uint8

const (
	// Dead means no read can see the entry any more. Evicting it costs nothing,
	// and Sweep removes it.
	Dead Age = iota
	// Over means the entry's window is over. Reads weigh it less than a
	// current one, or not at all.
	Over
	// Current means reads count the entry in full.
	Current
)

// Config configures a [Map].
type Config[K comparable, V any] struct {
	// Max caps the entries: an insert past it evicts one first. 0 (or
	// less) means no cap.
	Max int
	// MaxPerTenant caps the entries of one tenant: an insert past it
	// evicts one of the tenant's own first. 0 (or less) means no cap but
	// Max.
	MaxPerTenant int
	// Tenant returns the tenant of a key. Required.
	Tenant func(K) string
	// Age returns how old an entry is at now (Unix milliseconds).
	// Required.
	Age func(key K, val *V, now int64) Age
}

// Map is a map from K to V holding at most Config.Max entries, shared
// fairly by tenants (see the package documentation). Values live in
// entries of their own: a pointer returned by a method stays valid until
// its entry is deleted, evicted or swept. Create one with [New].
type Map[K comparable, V any] struct {
	cfg     Config[K, V]
	entries map[K]*entry[K, V]
	tenants map[string]*tenant[K, V]
	largest tenantHeap[K, V] // the tenants, the one holding the most first
	ring    []*entry[K, V]   // every entry, in the order Sweep visits them
	hand    int              // the index in ring Sweep looks at next
}

type entry[K comparable, V any] struct {
	key        K
	val        V
	tenant     *tenant[K, V]
	prev, next *entry[K, V] // in the tenant's list
	used       bool         // in the tenant's used list, not its once list
	slot       int          // index in ring
}

type tenant[K comparable, V any] struct {
	name string
	n    int        // entries held
	once list[K, V] // entries never used since their insert, oldest first
	used list[K, V] // entries used since, least recently used first
	idx  int        // index in Map.largest
}

// New returns an empty Map. It panics if cfg.Tenant or cfg.Age is nil.
func New[K comparable, V any](cfg Config[K, V]) *Map[K, V] {
	if cfg.Tenant == nil || cfg.Age == nil {
		panic("fairmap: Config.Tenant and Config.Age are required")
	}
	return &Map[K, V]{cfg: cfg, entries: map[K]*entry[K, V]{}, tenants: map[string]*tenant[K, V]{}}
}

// Len returns the number of entries, at most Config.Max when it is set.
func (m *Map[K, V]) Len() int { return len(m.entries) }

// Peek returns the value of key, or nil if it is absent, leaving its
// place in the eviction order as it is.
func (m *Map[K, V]) Peek(key K) *V {
	if e := m.entries[key]; e != nil {
		return &e.val
	}
	return nil
}

// Use returns the value of key, or nil if it is absent, and marks it used
// now: it moves to the end of its tenant's entries in use, the last to be
// evicted.
func (m *Map[K, V]) Use(key K) *V {
	e := m.entries[key]
	if e == nil {
		return nil
	}
	t := e.tenant
	if e.used {
		t.used.remove(e)
	} else {
		t.once.remove(e)
		e.used = true
	}
	t.used.pushBack(e)
	return &e.val
}

// Insert stores val under key as an entry seen once, and returns a
// pointer to the stored value. If key was present, its entry is replaced.
// If the map is full (Max), or key's tenant holds MaxPerTenant entries,
// one entry is evicted first (see the package documentation), chosen by
// the entries' Age at now; the new entry is never the one evicted.
func (m *Map[K, V]) Insert(key K, val V, now int64) *V {
	m.Delete(key)
	name := m.cfg.Tenant(key)
	m.makeRoom(m.tenants[name], now)
	t := m.tenants[name]
	if t == nil {
		t = &tenant[K, V]{name: name}
		m.tenants[name] = t
		heap.Push(&m.largest, t)
	}
	e := &entry[K, V]{key: key, val: val, tenant: t, slot: len(m.ring)}
	m.entries[key] = e
	m.ring = append(m.ring, e)
	t.once.pushBack(e)
	t.n++
	heap.Fix(&m.largest, t.idx)
	return &e.val
}

// Delete removes key's entry, and reports whether there was one.
func (m *Map[K, V]) Delete(key K) bool {
	e := m.entries[key]
	if e == nil {
		return false
	}
	m.remove(e)
	return true
}

// Sweep looks at the next n entries of a round over the map that carries
// on where the previous Sweep stopped, removes those that are [Dead] at
// now, and returns how many it removed. A caller that sweeps a few entries
// per insert reclaims dead entries at least as fast as it inserts, without
// ever walking the whole map at once.
func (m *Map[K, V]) Sweep(now int64, n int) (removed int) {
	for range n {
		if len(m.ring) == 0 {
			break
		}
		if m.hand >= len(m.ring) {
			m.hand = 0
		}
		e := m.ring[m.hand]
		if m.cfg.Age(e.key, &e.val, now) == Dead {
			m.remove(e) // the last entry moves to m.hand: looked at next
			removed++
			continue
		}
		m.hand++
	}
	return removed
}

// All returns every entry, in no particular order. It walks the whole
// map: callers use it for a full copy, not on a request's path. The map
// must not change during the walk.
func (m *Map[K, V]) All() iter.Seq2[K, *V] {
	return func(yield func(K, *V) bool) {
		for _, e := range m.ring {
			if !yield(e.key, &e.val) {
				return
			}
		}
	}
}

// makeRoom evicts what an insert of tenant t (nil: a tenant that holds
// nothing yet) needs: one of t's own entries if t is at MaxPerTenant, then
// entries of the tenant holding the most, t counted with its new entry,
// while the map is full.
func (m *Map[K, V]) makeRoom(t *tenant[K, V], now int64) {
	if per := m.cfg.MaxPerTenant; per > 0 && t != nil && t.n >= per {
		m.evictFrom(t, now)
	}
	for m.cfg.Max > 0 && len(m.entries) >= m.cfg.Max {
		victim := m.largest[0]
		if t != nil && t.n >= victim.n { // with its new entry, t holds the most
			victim = t
		}
		m.evictFrom(victim, now)
	}
}

// evictFrom evicts one entry of t (which holds at least one): the first
// dead one among the scanLimit least recently used of each of its lists,
// else the first of them in this order: seen once and over, seen once,
// used and over, used.
func (m *Map[K, V]) evictFrom(t *tenant[K, V], now int64) {
	var best *entry[K, V]
	bestRank := 5
	look := func(l *list[K, V], base int) bool {
		i := 0
		for e := l.front; e != nil && i < scanLimit; e, i = e.next, i+1 {
			rank := 0
			if a := m.cfg.Age(e.key, &e.val, now); a != Dead {
				rank = base + int(a)
			}
			if rank < bestRank {
				best, bestRank = e, rank
				if rank == 0 {
					return true
				}
			}
		}
		return false
	}
	if !look(&t.once, 0) {
		look(&t.used, 2)
	}
	m.remove(best)
}

// remove takes e out of the map, its tenant and the ring.
func (m *Map[K, V]) remove(e *entry[K, V]) {
	delete(m.entries, e.key)
	last := len(m.ring) - 1
	m.ring[e.slot] = m.ring[last]
	m.ring[e.slot].slot = e.slot
	m.ring[last] = nil
	m.ring = m.ring[:last]
	t := e.tenant
	if e.used {
		t.used.remove(e)
	} else {
		t.once.remove(e)
	}
	if t.n--; t.n == 0 {
		heap.Remove(&m.largest, t.idx)
		delete(m.tenants, t.name)
		return
	}
	heap.Fix(&m.largest, t.idx)
}

// list is a doubly linked list of entries, threaded through them.
type list[K comparable, V any] struct{ front, back *entry[K, V] }

func (l *list[K, V]) pushBack(e *entry[K, V]) {
	e.prev, e.next = l.back, nil
	if l.back != nil {
		l.back.next = e
	} else {
		l.front = e
	}
	l.back = e
}

func (l *list[K, V]) remove(e *entry[K, V]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.front = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.back = e.prev
	}
	e.prev, e.next = nil, nil
}

// tenantHeap orders tenants by the entries they hold, the most first
// (container/heap).
type tenantHeap[K comparable, V any] []*tenant[K, V]

func (h tenantHeap[K, V]) Len() int           { return len(h) }
func (h tenantHeap[K, V]) Less(i, j int) bool { return h[i].n > h[j].n }
func (h tenantHeap[K, V]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *tenantHeap[K, V]) Push(x any) {
	t := x.(*tenant[K, V])
	t.idx = len(*h)
	*h = append(*h, t)
}
func (h *tenantHeap[K, V]) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
