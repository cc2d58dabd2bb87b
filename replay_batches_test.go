package sluice

import (
	"slices"
	"testing"
)

// TestReplayBatches: the popped stack is handed on in order, in batches of
// at most ReplayBatch cells, each a slice of its own of the batch's length.
func TestReplayBatches(t *testing.T) {
	tests := []struct {
		name  string
		cells int
		size  int
		want  []int // the batches' lengths
	}{
		{"empty stack", 0, 4, nil},
		{"fewer than a batch", 3, 4, []int{3}},
		{"exactly a batch", 4, 4, []int{4}},
		{"a batch and a part", 9, 4, []int{4, 4, 1}},
		{"batches of one", 3, 1, []int{1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cells := make([]cell, tt.cells)
			var top *cell
			for i := range cells {
				if i+1 < len(cells) {
					cells[i].next = &cells[i+1]
				}
			}
			if len(cells) > 0 {
				top = &cells[0]
			}
			r := &replayer{l: &Limiter{cfg: Config{ReplayBatch: tt.size}}}
			var lens []int
			var got []*cell
			r.batches(top, func(b []*cell) {
				if cap(b) != len(b) {
					t.Errorf("a batch of %d cells has room for %d", len(b), cap(b))
				}
				lens = append(lens, len(b))
				got = append(got, b...)
				for _, c := range b {
					c.next = nil // as a requeue may overwrite it
				}
			})
			if !slices.Equal(lens, tt.want) {
				t.Fatalf("batches of %v, want %v", lens, tt.want)
			}
			for i := range got {
				if got[i] != &cells[i] {
					t.Fatalf("cell %d handed on out of order", i)
				}
			}
		})
	}
}
