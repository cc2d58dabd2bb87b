package redis

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
)

// asks builds asks from (limit, cost) pairs.
func asks(limitCost ...int64) []origin.Ask {
	out := make([]origin.Ask, 0, len(limitCost)/2)
	for i := 0; i+1 < len(limitCost); i += 2 {
		out = append(out, origin.Ask{Limit: limitCost[i], Cost: limitCost[i+1]})
	}
	return out
}

// seedCell sets a cell's count directly, as earlier replays would have.
func seedCell(t *testing.T, o *Origin, c origin.Cell, n int64) {
	t.Helper()
	if n == 0 {
		return
	}
	if err := o.client.HSet(context.Background(), CellKey(c), totalField, n).Err(); err != nil {
		t.Fatal(err)
	}
}

// wantVerdict is the reference: the asks decided in order by the pure
// window arithmetic on 128-bit products.
func wantVerdict(c origin.Check, cur, prev int64) origin.Verdict {
	pos := window.Position{Seq: c.Seq, Elapsed: c.Elapsed, D: c.Key.Duration.Milliseconds()}
	cur += c.Sent // the writer is new: its share rises from 0 to Sent
	v := origin.Verdict{Admitted: make([]bool, len(c.Asks)), Share: c.Sent}
	for i, a := range c.Asks {
		before := pos.Before(window.Add(cur, c.Imported.Current), window.Add(prev, c.Imported.Previous))
		if window.Decide(before, a.Limit, a.Cost).Success {
			cur += a.Cost
			v.Share += a.Cost
			v.Admitted[i] = true
		}
	}
	v.Counts = origin.Counts{Current: cur, Previous: prev}
	return v
}

func TestDecideMatchesWindowArithmetic(t *testing.T) {
	o := newOrigin(t, Config{Client: realRedis(t)})
	const thirtyDays = 30 * 24 * time.Hour
	big := int64(1)<<53 - 1
	tests := []struct {
		name      string
		d         time.Duration
		elapsed   int64
		cur, prev int64
		pending   int64
		imported  origin.Imported
		asks      []origin.Ask
	}{
		{name: "fresh counter admits up to the limit", d: time.Minute, asks: asks(10, 4, 10, 4, 10, 4)},
		{name: "last unit", d: time.Minute, cur: 9, asks: asks(10, 1, 10, 1)},
		{name: "pending counts before the asks", d: time.Minute, cur: 5, pending: 5, asks: asks(10, 1)},
		{name: "previous cell weighs by the time left", d: 10 * time.Second, elapsed: 2500, prev: 8, asks: asks(10, 4, 10, 4)},
		{name: "imported counts take part", d: time.Minute, elapsed: 30000, cur: 2, imported: origin.Imported{Current: 3, Previous: 6}, asks: asks(10, 2, 10, 1)},
		{name: "limit zero", d: time.Second, asks: asks(0, 1)},
		{name: "cost above the limit, then one that fits", d: time.Second, asks: asks(5, 6, 5, 5)},
		{name: "last millisecond of a cell", d: time.Minute, elapsed: 59999, prev: 60000, asks: asks(2, 1, 2, 1)},
		{name: "thirty-day window, huge previous cell", d: thirtyDays, elapsed: 1, prev: big - 5, asks: asks(big, 1)},
		{name: "thirty-day window, weight just under the limit", d: thirtyDays, elapsed: 1_296_000_000, prev: 2 * (big / 2), asks: asks(big/2+3, 3, big/2+3, 1)},
		{name: "longest window a Duration holds", d: math.MaxInt64 / time.Millisecond * time.Millisecond, elapsed: 1<<42 + 12345, prev: big, asks: asks(big, 1<<51, big, 1)},
		{name: "limits near 2^53", d: time.Hour, elapsed: 1, cur: big - 10, asks: asks(big, 9, big, 1, big, 1)},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := origin.Key{Workspace: workspace(t), Namespace: "ns", Identifier: "id", Duration: tc.d}
			seq := int64(1000 + i)
			seedCell(t, o, origin.Cell{Key: key, Sequence: seq}, tc.cur)
			seedCell(t, o, origin.Cell{Key: key, Sequence: seq - 1}, tc.prev)
			c := origin.Check{Key: key, Seq: seq, Elapsed: tc.elapsed, Writer: newWriter(), Sent: tc.pending, Imported: tc.imported, Asks: tc.asks}
			got, err := o.Decide(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if want := wantVerdict(c, tc.cur, tc.prev); !slices.Equal(got.Admitted, want.Admitted) || got.Counts != want.Counts {
				t.Fatalf("Decide = %+v, want %+v", got, want)
			}
		})
	}
}

// TestDecideRandom compares the script with the arithmetic on random checks
// spread over every magnitude the script accepts.
func TestDecideRandom(t *testing.T) {
	o := newOrigin(t, Config{Client: realRedis(t)})
	rng := rand.New(rand.NewPCG(1, 2))
	magnitude := func(bits int) int64 { return rng.Int64N(int64(1) << rng.IntN(bits)) }
	ws := workspace(t)
	for i := range 400 {
		d := max(1, magnitude(43))
		key := origin.Key{Workspace: ws, Namespace: "r", Identifier: "id", Duration: time.Duration(d) * time.Millisecond}
		seq := int64(i + 1)
		cur, prev := magnitude(53), magnitude(53)
		limit := magnitude(53)
		c := origin.Check{Key: key, Seq: seq, Elapsed: rng.Int64N(d), Writer: newWriter(), Sent: magnitude(20), Asks: []origin.Ask{
			{Limit: limit, Cost: 1 + magnitude(20)}, {Limit: limit, Cost: 1 + magnitude(53)},
		}}
		if cur+c.Sent+c.Asks[0].Cost+c.Asks[1].Cost > 1<<53-1 {
			cur = 0 // keep the stored total in the exact range
		}
		if i%2 == 0 { // put the first ask exactly on the boundary, or one past it
			pos := window.Position{Seq: seq, Elapsed: c.Elapsed, D: d}
			if edge := pos.Before(cur+c.Sent, prev) + c.Asks[0].Cost - rng.Int64N(2); edge <= 1<<53-1 {
				c.Asks[0].Limit = edge
			}
		}
		seedCell(t, o, origin.Cell{Key: key, Sequence: seq}, cur)
		seedCell(t, o, origin.Cell{Key: key, Sequence: seq - 1}, prev)
		got, err := o.Decide(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if want := wantVerdict(c, cur, prev); !slices.Equal(got.Admitted, want.Admitted) || got.Counts != want.Counts {
			t.Fatalf("check %+v (cur %d, prev %d): Decide = %+v, want %+v", c, cur, prev, got, want)
		}
	}
}

func TestDecideRejectsInexactChecks(t *testing.T) {
	o := newOrigin(t, Config{Client: realRedis(t)})
	key := origin.Key{Namespace: "n", Identifier: "i", Duration: time.Minute}
	tests := []struct {
		name string
		c    origin.Check
		want error
	}{
		{"limit of 2^53", origin.Check{Key: key, Asks: asks(1<<53, 1)}, ErrInexact},
		{"cost of 2^53", origin.Check{Key: key, Asks: asks(1, 1<<53)}, ErrInexact},
		{"sent count of 2^53", origin.Check{Key: key, Writer: newWriter(), Sent: 1 << 53}, ErrInexact},
		{"elapsed past the cell", origin.Check{Key: key, Elapsed: 60000}, ErrInvalidCell},
		{"no previous cell", origin.Check{Key: key, Seq: math.MinInt64}, ErrInvalidCell},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := o.Decide(context.Background(), tc.c); !errors.Is(err, tc.want) {
				t.Fatalf("Decide = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestDecideConcurrentNeverOverspends runs many clients deciding on one
// counter at once: exactly the limit is admitted.
func TestDecideConcurrentNeverOverspends(t *testing.T) {
	o := newOrigin(t, Config{Client: realRedis(t)})
	key := origin.Key{Workspace: workspace(t), Namespace: "n", Identifier: "hot", Duration: time.Hour}
	const limit, clients, each = 50, 8, 20
	var admitted sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range clients {
		admitted.Go(func() {
			for range each {
				v, err := o.Decide(context.Background(), origin.Check{Key: key, Seq: 7, Writer: newWriter(), Asks: asks(limit, 1)})
				if err != nil {
					t.Error(err)
					return
				}
				if v.Admitted[0] {
					mu.Lock()
					total++
					mu.Unlock()
				}
			}
		})
	}
	admitted.Wait()
	if total != limit {
		t.Fatalf("admitted %d, want exactly %d", total, limit)
	}
}
