package cluster

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
)

func testKey(i int) origin.Key {
	return origin.Key{Workspace: "ws", Namespace: "api", Identifier: "user-" + strconv.Itoa(i), Duration: time.Minute}
}

func nodeIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%d", i)
	}
	return ids
}

// TestRingBalance measures max/mean load over 100k identities.
func TestRingBalance(t *testing.T) {
	const keys = 100_000
	for _, tc := range []struct {
		nodes   int
		maxSkew float64 // max/mean bound: binomial noise is ~1% at 9 nodes
	}{{3, 1.02}, {5, 1.03}, {9, 1.04}} {
		t.Run(strconv.Itoa(tc.nodes), func(t *testing.T) {
			r := NewRing(nodeIDs(tc.nodes)...)
			load := map[string]int{}
			for i := range keys {
				load[r.Owner(testKey(i))]++
			}
			if len(load) != tc.nodes {
				t.Fatalf("%d of %d nodes own identities", len(load), tc.nodes)
			}
			most, least := 0, keys
			for _, n := range load {
				most, least = max(most, n), min(least, n)
			}
			mean := float64(keys) / float64(tc.nodes)
			skew := float64(most) / mean
			t.Logf("%d nodes, %d identities: max/mean %.4f, min/mean %.4f", tc.nodes, keys, skew, float64(least)/mean)
			if skew > tc.maxSkew {
				t.Errorf("max/mean %.4f above %.2f", skew, tc.maxSkew)
			}
		})
	}
}

// TestRingMovement checks that a join moves only identities to the new
// member and a leave moves only the leaver's identities, and measures the
// share that moved (ideally 1/(n+1) on join and 1/n on leave).
func TestRingMovement(t *testing.T) {
	const keys = 100_000
	for _, n := range []int{3, 5, 9} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ids := nodeIDs(n + 1)
			before, after := NewRing(ids[:n]...), NewRing(ids...)
			joiner := ids[n]
			moved := 0
			for i := range keys {
				k := testKey(i)
				was, is := before.Owner(k), after.Owner(k)
				if was == is {
					continue
				}
				moved++
				if is != joiner {
					t.Fatalf("join: identity %d moved from %s to %s, not to the joiner", i, was, is)
				}
			}
			t.Logf("join %d -> %d nodes: %.2f%% of identities moved (ideal %.2f%%)", n, n+1, 100*float64(moved)/keys, 100/float64(n+1))
			if want := float64(keys) / float64(n+1); float64(moved) < 0.9*want || float64(moved) > 1.1*want {
				t.Errorf("join moved %d identities, want about %.0f", moved, want)
			}

			leaver := ids[0]
			left := NewRing(ids[1:n]...)
			moved = 0
			for i := range keys {
				k := testKey(i)
				was, is := before.Owner(k), left.Owner(k)
				if was == is {
					continue
				}
				moved++
				if was != leaver {
					t.Fatalf("leave: identity %d moved from %s (still a member) to %s", i, was, is)
				}
			}
			t.Logf("leave %d -> %d nodes: %.2f%% of identities moved (ideal %.2f%%)", n, n-1, 100*float64(moved)/keys, 100/float64(n))
			if want := float64(keys) / float64(n); float64(moved) < 0.9*want || float64(moved) > 1.1*want {
				t.Errorf("leave moved %d identities, want about %.0f", moved, want)
			}
		})
	}
}

func TestKeyHashSeparatesFields(t *testing.T) {
	base := origin.Key{Workspace: "ab", Namespace: "c", Identifier: "d", Duration: time.Second}
	for _, k := range []origin.Key{
		{Workspace: "a", Namespace: "bc", Identifier: "d", Duration: time.Second},
		{Workspace: "ab", Namespace: "", Identifier: "cd", Duration: time.Second},
		{Workspace: "ab", Namespace: "c", Identifier: "d", Duration: 2 * time.Second},
		{Workspace: "abc", Namespace: "", Identifier: "d", Duration: time.Second},
	} {
		if KeyHash(k) == KeyHash(base) {
			t.Errorf("KeyHash(%+v) == KeyHash(%+v)", k, base)
		}
	}
	if first, again := KeyHash(base), KeyHash(base); first != again {
		t.Error("KeyHash is not deterministic")
	}
}

func TestRingEmptyAndMembers(t *testing.T) {
	if got := NewRing().Owner(testKey(1)); got != "" {
		t.Errorf("empty ring owner %q", got)
	}
	r := NewRing("b", "a", "b")
	if r.Len() != 2 || !r.Has("a") || r.Has("c") {
		t.Errorf("members %v", r.Members())
	}
}

// BenchmarkOwner measures the owner lookup of every routed origin call:
// one xxhash of the identity and one score per member.
func BenchmarkOwner(b *testing.B) {
	for _, n := range []int{3, 9, 27} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			r := NewRing(nodeIDs(n)...)
			k := testKey(42)
			b.ReportAllocs()
			for b.Loop() {
				_ = r.Owner(k)
			}
		})
	}
}
