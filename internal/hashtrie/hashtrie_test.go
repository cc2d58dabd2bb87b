package hashtrie

import (
	"hash/maphash"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

var seed = maphash.MakeSeed()

func goodHash(k int) uint64 { return maphash.Comparable(seed, k) }

// Degenerate hashes force deep tries and full-hash collision chains.
func hashes() map[string]func(int) uint64 {
	return map[string]func(int) uint64{
		"seeded":            goodHash,
		"all collide":       func(int) uint64 { return 42 },
		"low bits only":     func(k int) uint64 { return uint64(k % 8) },
		"high bits only":    func(k int) uint64 { return uint64(k%8) << 61 },
		"mostly collisions": func(k int) uint64 { return uint64(k % 3) },
	}
}

// TestMatchesGoMap drives the trie and a Go map with the same random
// operations and compares them after every step.
func TestMatchesGoMap(t *testing.T) {
	for name, h := range hashes() {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				m := New[int, int](h)
				model := map[int]*int{}
				ops := rapid.IntRange(1, 300).Draw(t, "ops")
				for range ops {
					k := rapid.IntRange(0, 40).Draw(t, "key")
					switch rapid.IntRange(0, 2).Draw(t, "op") {
					case 0:
						v, loaded := m.LoadOrStore(h(k), &k, func(v *int) { *v = k * 10 })
						if _, ok := model[k]; ok != loaded {
							t.Fatalf("LoadOrStore(%d) loaded=%v, model has=%v", k, loaded, ok)
						}
						if !loaded {
							model[k] = v
						} else if v != model[k] {
							t.Fatalf("LoadOrStore(%d) returned a different value pointer", k)
						}
					case 1:
						want := model[k]
						if want == nil {
							want = new(int)
						}
						deleted := m.CompareAndDelete(h(k), k, want)
						if deleted != (model[k] != nil) {
							t.Fatalf("CompareAndDelete(%d) = %v, model has=%v", k, deleted, model[k] != nil)
						}
						delete(model, k)
					case 2:
						if got := m.Load(h(k), &k); got != model[k] {
							t.Fatalf("Load(%d) = %p, want %p", k, got, model[k])
						}
					}
				}
				n := 0
				for k, v := range m.All() {
					n++
					if model[k] != v || *v != k*10 {
						t.Fatalf("All yielded %d=%d, not in the model", k, *v)
					}
				}
				if n != len(model) {
					t.Fatalf("All yielded %d entries, model has %d", n, len(model))
				}
				if len(model) == 0 && !m.root.empty() {
					t.Fatalf("empty map still has trie nodes")
				}
			})
		})
	}
}

// TestConcurrent has goroutines insert, look up and delete overlapping keys;
// run with -race. Every goroutine must agree on one value per live key.
func TestConcurrent(t *testing.T) {
	for name, h := range hashes() {
		t.Run(name, func(t *testing.T) {
			m := New[int, int](h)
			const workers, keys, rounds = 8, 64, 200
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for r := range rounds {
						k := (w*7 + r) % keys
						v, _ := m.LoadOrStore(h(k), &k, func(v *int) { *v = k })
						if *v != k {
							t.Errorf("key %d holds %d", k, *v)
							return
						}
						if got := m.Load(h(k), &k); got != nil && *got != k {
							t.Errorf("Load(%d) = %d", k, *got)
							return
						}
						if r%3 == 0 {
							m.CompareAndDelete(h(k), k, v)
						}
					}
				})
			}
			wg.Wait()
			for k, v := range m.All() {
				if !m.CompareAndDelete(h(k), k, v) {
					t.Fatalf("could not delete %d", k)
				}
			}
			if !m.root.empty() {
				t.Fatal("map not empty after deleting everything")
			}
		})
	}
}

func BenchmarkLoad(b *testing.B) {
	m := New[int, int](goodHash)
	const n = 1 << 16
	for k := range n {
		m.LoadOrStore(goodHash(k), &k, nil)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := i & (n - 1)
		if m.Load(goodHash(k), &k) == nil {
			b.Fatal("missing")
		}
	}
}

func TestKeyOf(t *testing.T) {
	m := New[string, [3]int64](func(s string) uint64 { return maphash.String(seed, s) })
	for _, k := range []string{"a", "bb", "", "ccc"} {
		v, _ := m.LoadOrStore(maphash.String(seed, k), &k, nil)
		if got := m.KeyOf(v); got != k {
			t.Fatalf("KeyOf = %q, want %q", got, k)
		}
	}
}
