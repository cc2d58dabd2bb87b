package fairmap

import (
	"fmt"
	mathrand "math/rand/v2"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: a Map
// starts none.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// key is a test key: a tenant and a name.
type key struct{ tenant, name string }

// val is a test value: the age the test gives its entry.
type val struct{ age Age }

// newMap returns a map of test entries, and a counter of the calls to Age
// (the entries an operation looked at).
func newMap(maxEntries, perTenant int) (*Map[key, val], *int) {
	looked := new(int)
	m := New(Config[key, val]{
		Max:          maxEntries,
		MaxPerTenant: perTenant,
		Tenant:       func(k key) string { return k.tenant },
		Age: func(_ key, v *val, _ int64) Age {
			*looked++
			return v.age
		},
	})
	return m, looked
}

// held returns the entries each tenant holds.
func held(m *Map[key, val]) map[string]int {
	out := map[string]int{}
	for k := range m.All() {
		out[k.tenant]++
	}
	return out
}

// check fails t if m's structures disagree: every entry in exactly one
// list of its tenant and in its ring slot, tenant counts matching, the
// heap ordered.
func check(t *testing.T, m *Map[key, val]) {
	t.Helper()
	if len(m.ring) != len(m.entries) {
		t.Fatalf("ring holds %d entries, the map %d", len(m.ring), len(m.entries))
	}
	for i, e := range m.ring {
		if e.slot != i || m.entries[e.key] != e {
			t.Fatalf("ring slot %d holds %v at slot %d", i, e.key, e.slot)
		}
	}
	total := 0
	for name, tn := range m.tenants {
		n := 0
		for _, l := range []*list[key, val]{&tn.once, &tn.used} {
			var prev *entry[key, val]
			for e := l.front; e != nil; e = e.next {
				if e.tenant != tn || e.prev != prev || e.used != (l == &tn.used) {
					t.Fatalf("tenant %q: entry %v misplaced", name, e.key)
				}
				prev, n = e, n+1
			}
			if l.back != prev {
				t.Fatalf("tenant %q: list back %v, want %v", name, l.back, prev)
			}
		}
		if n != tn.n || n == 0 || m.largest[tn.idx] != tn {
			t.Fatalf("tenant %q: %d entries listed, %d counted", name, n, tn.n)
		}
		total += n
	}
	if total != len(m.entries) || len(m.largest) != len(m.tenants) {
		t.Fatalf("tenants hold %d entries, the map %d", total, len(m.entries))
	}
	for i := 1; i < len(m.largest); i++ {
		if m.largest[(i-1)/2].n < m.largest[i].n {
			t.Fatalf("heap out of order at %d", i)
		}
	}
}

// TestCapHolds inserts far more entries than the caps, spread over
// tenants: the map holds at most Max after each insert, and each tenant at
// most MaxPerTenant.
func TestCapHolds(t *testing.T) {
	tests := []struct {
		name           string
		max, perTenant int
		tenants        int
		wantLen        int
	}{
		{"one tenant", 100, 0, 1, 100},
		{"many tenants", 100, 0, 13, 100},
		{"more tenants than room", 10, 0, 50, 10},
		{"a cap per tenant", 1000, 7, 5, 35},
		{"a cap per tenant over the total", 20, 15, 3, 20},
		{"no cap", 0, 0, 3, 5000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newMap(tc.max, tc.perTenant)
			for i := range 5000 {
				m.Insert(key{fmt.Sprint(i % tc.tenants), fmt.Sprint(i)}, val{Current}, 0)
				if tc.max > 0 && m.Len() > tc.max {
					t.Fatalf("after %d inserts: %d entries, over %d", i+1, m.Len(), tc.max)
				}
			}
			check(t, m)
			if m.Len() != tc.wantLen {
				t.Fatalf("%d entries, want %d", m.Len(), tc.wantLen)
			}
			for tenant, n := range held(m) {
				if tc.perTenant > 0 && n > tc.perTenant {
					t.Fatalf("tenant %s holds %d, over %d", tenant, n, tc.perTenant)
				}
			}
		})
	}
}

// TestEvictionIsFair fills the map with some tenants, then has a flooder
// insert many times the cap: the tenants holding the most come down to one
// level, and those below it keep every entry.
func TestEvictionIsFair(t *testing.T) {
	tests := []struct {
		name  string
		first map[string]int // entries inserted before the flood, in name order
		want  map[string]int // entries held after it
	}{
		{"a tenant within its share keeps all", map[string]int{"a": 45}, map[string]int{"a": 45, "z": 55}},
		{"a tenant over the level comes down to it", map[string]int{"a": 80}, map[string]int{"a": 50, "z": 50}},
		{"the largest pay first", map[string]int{"a": 30, "b": 60}, map[string]int{"a": 30, "b": 35, "z": 35}},
		{"small tenants keep all", map[string]int{"a": 5, "b": 10, "c": 20}, map[string]int{"a": 5, "b": 10, "c": 20, "z": 65}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newMap(100, 0)
			for _, tenant := range []string{"a", "b", "c"} {
				for i := range tc.first[tenant] {
					m.Insert(key{tenant, fmt.Sprint(i)}, val{Current}, 0)
				}
			}
			for i := range 1000 {
				m.Insert(key{"z", fmt.Sprint(i)}, val{Current}, 0)
			}
			check(t, m)
			if got := held(m); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("held %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEvictionOrder fills one tenant's map with two entries, one of each
// kind, then inserts a third: the entry evicted is the dead one, else the
// one seen once, else the one whose window is over, else the least
// recently used.
func TestEvictionOrder(t *testing.T) {
	type spec struct {
		age  Age
		used bool
	}
	tests := []struct {
		name       string
		old, young spec // old is inserted (and used) first
		want       string
	}{
		{"the least recently used of two seen once", spec{Current, false}, spec{Current, false}, "old"},
		{"the least recently used of two in use", spec{Current, true}, spec{Current, true}, "old"},
		{"seen once before in use", spec{Current, true}, spec{Current, false}, "young"},
		{"over before current, seen once", spec{Current, false}, spec{Over, false}, "young"},
		{"over before current, in use", spec{Current, true}, spec{Over, true}, "young"},
		{"seen once before over and in use", spec{Over, true}, spec{Current, false}, "young"},
		{"dead before seen once", spec{Current, false}, spec{Dead, true}, "young"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newMap(2, 0)
			for _, e := range []struct {
				name string
				spec
			}{{"old", tc.old}, {"young", tc.young}} {
				m.Insert(key{"a", e.name}, val{e.age}, 0)
				if e.used {
					m.Use(key{"a", e.name})
				}
			}
			m.Insert(key{"a", "new"}, val{Current}, 0)
			check(t, m)
			if m.Peek(key{"a", tc.want}) != nil || m.Peek(key{"a", "new"}) == nil || m.Len() != 2 {
				t.Fatalf("after the insert: %v; want %q evicted", held(m), tc.want)
			}
		})
	}
}

// TestWorkIsBounded counts the entries each operation looks at on a full
// map of 10,000 entries: an insert that evicts looks at 2×scanLimit at
// most, a Sweep at the number it is given, whatever the map holds.
func TestWorkIsBounded(t *testing.T) {
	const size = 10_000
	tests := []struct {
		name  string
		op    func(m *Map[key, val], i int)
		bound int
	}{
		{"insert into a full map", func(m *Map[key, val], i int) {
			m.Insert(key{"a", fmt.Sprint("new", i)}, val{Current}, 0)
		}, 2 * scanLimit},
		{"sweep of 8", func(m *Map[key, val], _ int) { m.Sweep(0, 8) }, 8},
		{"use", func(m *Map[key, val], i int) { m.Use(key{"a", fmt.Sprint(i)}) }, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, looked := newMap(size, 0)
			for i := range size {
				m.Insert(key{"a", fmt.Sprint(i)}, val{Current}, 0)
				m.Use(key{"a", fmt.Sprint(i)}) // in use: nothing is cheap to evict
			}
			for i := range 100 {
				*looked = 0
				tc.op(m, i)
				if *looked > tc.bound {
					t.Fatalf("operation %d looked at %d entries, over %d", i, *looked, tc.bound)
				}
			}
			check(t, m)
		})
	}
}

// TestSweepRemovesDeadEntries marks a random half of the entries dead
// and sweeps a few at a time: every dead entry is gone after one round
// (as many looks as entries), and no live one.
func TestSweepRemovesDeadEntries(t *testing.T) {
	m, _ := newMap(0, 0)
	rng := mathrand.New(mathrand.NewPCG(1, 2))
	dead := 0
	for i := range 1000 {
		age := Current
		if rng.IntN(2) == 0 {
			age, dead = Dead, dead+1
		}
		m.Insert(key{fmt.Sprint(i % 3), fmt.Sprint(i)}, val{age}, 0)
	}
	removed := 0
	for range 1000 / 8 {
		removed += m.Sweep(0, 8)
	}
	check(t, m)
	if removed != dead || m.Len() != 1000-dead {
		t.Fatalf("removed %d of %d dead entries; %d left", removed, dead, m.Len())
	}
	for _, v := range m.All() {
		if v.age == Dead {
			t.Fatal("a dead entry is left")
		}
	}
}

// TestRandomOperationsKeepTheStructure runs random inserts, uses, deletes
// and sweeps, and checks the map's structures after each.
func TestRandomOperationsKeepTheStructure(t *testing.T) {
	m, _ := newMap(50, 20)
	rng := mathrand.New(mathrand.NewPCG(3, 4))
	for range 5000 {
		k := key{fmt.Sprint(rng.IntN(5)), fmt.Sprint(rng.IntN(200))}
		switch rng.IntN(4) {
		case 0:
			m.Insert(k, val{Age(rng.IntN(3))}, 0)
		case 1:
			m.Use(k)
		case 2:
			m.Delete(k)
		default:
			m.Sweep(0, rng.IntN(10))
		}
		check(t, m)
		if m.Len() > 50 {
			t.Fatalf("%d entries, over 50", m.Len())
		}
	}
}
