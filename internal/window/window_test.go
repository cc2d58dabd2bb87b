package window

import (
	"math"
	"math/big"
	"testing"
)

func TestAt(t *testing.T) {
	tests := []struct {
		name      string
		t, d      int64
		seq, el   int64
		wantReset int64
	}{
		{"epoch", 0, 1000, 0, 0, 1000},
		{"inside first cell", 999, 1000, 0, 999, 1000},
		{"exactly on a boundary", 1000, 1000, 1, 0, 2000},
		{"one millisecond windows", 12345, 1, 12345, 0, 12346},
		{"thirty days", 2_592_000_000*3 + 7, 2_592_000_000, 3, 7, 2_592_000_000 * 4},
		{"reset saturates", math.MaxInt64, 1000, math.MaxInt64 / 1000, math.MaxInt64 % 1000, math.MaxInt64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := At(tc.t, tc.d)
			if p.Seq != tc.seq || p.Elapsed != tc.el {
				t.Fatalf("At(%d, %d) = seq %d elapsed %d, want %d %d", tc.t, tc.d, p.Seq, p.Elapsed, tc.seq, tc.el)
			}
			if got := p.Reset(); got != tc.wantReset {
				t.Fatalf("Reset() = %d, want %d", got, tc.wantReset)
			}
		})
	}
}

func TestWeightedIsExact(t *testing.T) {
	tests := []struct {
		name        string
		prev, el, d int64
		want        int64
	}{
		{"half elapsed", 10, 500, 1000, 5},
		{"floor", 3, 1, 2, 1},
		{"start of window counts fully", 7, 0, 1000, 7},
		{"last millisecond", 1000, 999, 1000, 1},
		{"zero prev", 0, 10, 100, 0},
		{"huge prev does not overflow", math.MaxInt64, 1, 3, math.MaxInt64 / 3 * 2},
		{"huge prev and window", math.MaxInt64, 1, 2_592_000_000, bigWeighted(math.MaxInt64, 1, 2_592_000_000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Position{Elapsed: tc.el, D: tc.d}
			if got := p.Weighted(tc.prev); got != tc.want {
				t.Fatalf("Weighted(%d) at %d/%d = %d, want %d", tc.prev, tc.el, tc.d, got, tc.want)
			}
		})
	}
}

func bigWeighted(prev, el, d int64) int64 {
	n := new(big.Int).Mul(big.NewInt(prev), big.NewInt(d-el))
	return n.Quo(n, big.NewInt(d)).Int64()
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name                string
		before, limit, cost int64
		want                Outcome
	}{
		{"9 plus 1 at limit 10 passes with 0 left", 9, 10, 1, Outcome{true, 10, 0}},
		{"prev 10 at half plus cur 5 plus 1 is denied", 10, 10, 1, Outcome{false, 10, 0}},
		{"peek", 4, 10, 0, Outcome{true, 4, 6}},
		{"limit 0 denies cost 1", 0, 0, 1, Outcome{false, 0, 0}},
		{"limit 0 allows a peek", 0, 0, 0, Outcome{true, 0, 0}},
		{"cost above limit", 0, 5, 6, Outcome{false, 0, 5}},
		{"usage above limit reports 0 remaining", 12, 10, 0, Outcome{false, 12, 0}},
		{"no overflow at the top", 1, math.MaxInt64, math.MaxInt64, Outcome{false, 1, math.MaxInt64 - 1}},
		{"exact at the top", 1, math.MaxInt64, math.MaxInt64 - 1, Outcome{true, math.MaxInt64, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.before, tc.limit, tc.cost); got != tc.want {
				t.Fatalf("Decide(%d, %d, %d) = %+v, want %+v", tc.before, tc.limit, tc.cost, got, tc.want)
			}
		})
	}
}
