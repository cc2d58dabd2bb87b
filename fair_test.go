package sluice

import (
	"context"
	"maps"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

func TestQuotas(t *testing.T) {
	tests := []struct {
		name              string
		held              map[string]int64
		target, perTenant int64
		want              map[string]int64
	}{
		{"under the target", map[string]int64{"a": 10, "b": 10}, 90, 0, map[string]int64{}},
		{"one tenant over its share pays alone", map[string]int64{"a": 10, "b": 95}, 90, 0, map[string]int64{"b": 15}},
		{"the largest come down to one level", map[string]int64{"a": 5, "b": 50, "c": 55}, 90, 0, map[string]int64{"b": 8, "c": 13}},
		{"never below the share", map[string]int64{"a": 29, "b": 31, "c": 40}, 90, 0, map[string]int64{"b": 1, "c": 10}},
		{"a single tenant comes down to the target", map[string]int64{"": 101}, 90, 0, map[string]int64{"": 11}},
		{"per-tenant cap whatever the total", map[string]int64{"a": 30, "b": 5}, 900, 20, map[string]int64{"a": 10}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := quotas(tc.held, tc.target, tc.perTenant)
			if !maps.Equal(got, tc.want) {
				t.Fatalf("quotas(%v) = %v, want %v", tc.held, got, tc.want)
			}
		})
	}
}

// TestTenantWithinShareKeepsItsCounters has one workspace spend half of a
// 30-day limit, then another flood the table with new identities, many
// times its capacity: the first workspace, within its share, keeps its
// counter (its next answer still counts what it spent), and the flood is
// evicted from the flooding workspace only.
func TestTenantWithinShareKeepsItsCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const capacity = 200
		obs := &evictions{by: map[string]int{}}
		l, err := New(Config{MaxCounters: capacity, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx := context.Background()
		victim := Request{Workspace: "a", Namespace: "n", Identifier: "user", Limit: 100, Duration: 30 * 24 * time.Hour, Cost: 50}
		if res, _ := l.Ratelimit(ctx, victim); !res.Success {
			t.Fatal("the victim's first request was denied")
		}
		for call := range 30 {
			for i := range 100 {
				r := Request{Workspace: "b", Namespace: "n", Identifier: strconv.Itoa(call*100 + i), Limit: 10, Duration: time.Hour, Cost: 1}
				if _, err := l.Ratelimit(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			synctest.Wait() // the janitor evicts when it is asked to
		}
		victim.Cost = 0
		res, _ := l.Ratelimit(ctx, victim)
		if res.Remaining != 50 {
			t.Fatalf("the victim's counter after the flood: remaining %d, want 50 (it was evicted by another tenant's traffic)", res.Remaining)
		}
		if obs.by["a"] != 0 || obs.by["b"] == 0 {
			t.Fatalf("evicted per tenant %v, want only b's cells", obs.by)
		}
		if live := l.cells.live.Load(); live > capacity {
			t.Fatalf("%d cells held, over the cap of %d", live, capacity)
		}
	})
}

// TestMaxCountersPerWorkspace caps one tenant's cells below the table's
// capacity: past it, its own cells go at the next janitor pass.
func TestMaxCountersPerWorkspace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Config{MaxCountersPerWorkspace: 50, JanitorInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for i := range 120 {
			r := Request{Workspace: "b", Namespace: "n", Identifier: strconv.Itoa(i), Limit: 10, Duration: time.Hour, Cost: 1}
			if _, err := l.Ratelimit(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if held := l.cells.heldByTenant()["b"]; held > 50 {
			t.Fatalf("tenant b holds %d cells, over its cap of 50", held)
		}
	})
}

// evictions records the cells evicted per tenant.
type evictions struct {
	nopObserver
	by map[string]int
}

func (e *evictions) Evicted(tenant string, cells int) { e.by[tenant] += cells }
