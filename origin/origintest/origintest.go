// Package origintest checks that an [origin.Origin] keeps the contract of
// its reservations: a check with a Holder admits under the holder's share
// and counts its writer's unsent count without storing it, and Withdraw
// takes a writer's share back for good. Each origin's tests run it against
// the real thing (a memory store, Redis, a Redis Cluster, a cluster of
// peers).
package origintest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// step is one call of a case: an Apply (sent), a Decide (check) or a
// Withdraw, and what the cell's total is after it.
type step struct {
	apply    *origin.Delta
	check    *origin.Check
	withdraw origin.Writer
	// want: the verdict's Admitted and Stale for a check; the cell's total
	// (read with Load) after every step.
	admitted []bool
	stale    bool
	total    int64
}

// Reservations runs the reservation and withdrawal cases against o,
// each on a counter of its own.
func Reservations(t *testing.T, o origin.Origin) {
	const w, h origin.Writer = 0x1111, 0x2222
	ask := func(n int) []origin.Ask { return slices.Repeat([]origin.Ask{{Limit: 5, Cost: 1}}, n) }
	cases := []struct {
		name  string
		steps []step
	}{
		{"a reservation admits under its holder and counts the unsent count", []step{
			{check: &origin.Check{Writer: w, Sent: 3, Holder: h, Asks: ask(3)}, admitted: []bool{true, true, false}, total: 2},
			{withdraw: h, total: 0},
			{withdraw: h, total: 0},
		}},
		{"a reservation counts the writer's stored share once", []step{
			{apply: &origin.Delta{Writer: w, Sent: 4}, total: 4},
			{check: &origin.Check{Writer: w, Sent: 4, Holder: h, Asks: ask(2)}, admitted: []bool{true, false}, total: 5},
			{withdraw: h, total: 4},
		}},
		{"a reservation landing after its withdrawal is stale", []step{
			{withdraw: h, total: 0},
			{check: &origin.Check{Writer: w, Holder: h, Asks: ask(1)}, admitted: []bool{false}, stale: true, total: 0},
		}},
		{"a withdrawn writer's writes change nothing", []step{
			{apply: &origin.Delta{Writer: w, Sent: 5}, total: 5},
			{withdraw: w, total: 0},
			{apply: &origin.Delta{Writer: w, Sent: 7}, total: 0},
			{check: &origin.Check{Writer: w, Sent: 8, Asks: ask(1)}, admitted: []bool{false}, stale: true, total: 0},
		}},
	}
	now := time.Now()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := origin.Key{Namespace: "origintest", Identifier: fmt.Sprintf("%s-%d-%d", t.Name(), now.UnixNano(), i), Duration: time.Hour}
			seq := now.UnixMilli() / time.Hour.Milliseconds()
			for j, s := range tc.steps {
				run(t, o, key, seq, j, s)
			}
		})
	}
}

// run runs step s, the j-th of its case, on cell seq of key.
func run(t *testing.T, o origin.Origin, key origin.Key, seq int64, j int, s step) {
	t.Helper()
	ctx := context.Background()
	cell := origin.Cell{Key: key, Sequence: seq}
	switch {
	case s.apply != nil:
		d := *s.apply
		d.Cell = cell
		if _, err := o.Apply(ctx, []origin.Delta{d}); err != nil {
			t.Fatalf("step %d: Apply: %v", j, err)
		}
	case s.check != nil:
		c := *s.check
		c.Key, c.Seq = key, seq
		v, err := o.Decide(ctx, c)
		if err != nil {
			t.Fatalf("step %d: Decide: %v", j, err)
		}
		if !slices.Equal(v.Admitted, s.admitted) || v.Stale != s.stale {
			t.Fatalf("step %d: admitted %v stale %v, want %v stale %v", j, v.Admitted, v.Stale, s.admitted, s.stale)
		}
	default:
		if err := o.Withdraw(ctx, cell, s.withdraw); err != nil {
			t.Fatalf("step %d: Withdraw: %v", j, err)
		}
	}
	counts, err := o.Load(ctx, key, seq)
	if err != nil {
		t.Fatalf("step %d: Load: %v", j, err)
	}
	if counts.Current != s.total {
		t.Fatalf("step %d: total %d, want %d", j, counts.Current, s.total)
	}
}
