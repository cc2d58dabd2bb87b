package redis

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/origin"
)

// TestMergeGroups checks how the calls of an Apply to several masters make
// its result: a master that failed as a whole fails its own cells, in an
// *origin.CellErrors with the cells other masters refused alone, and only
// when every master failed as a whole does the Apply fail as a whole.
func TestMergeGroups(t *testing.T) {
	down := fmt.Errorf("redis: apply on a:1: %w: timeout", origin.ErrUnavailable)
	refused := fmt.Errorf("%w: not a hash", ErrBadValue)
	groups := []group{{cells: []int{0, 2}}, {cells: []int{1, 3}}, {cells: []int{4}}}
	tests := []struct {
		name       string
		errs       []error
		wantWhole  bool  // the Apply fails as a whole, with no total
		wantFailed []int // otherwise, the cells named in the CellErrors
	}{
		{name: "every master answers", errs: []error{nil, nil, nil}},
		{name: "one master fails", errs: []error{nil, down, nil}, wantFailed: []int{1, 3}},
		{name: "a refused cell and a failed master",
			errs:       []error{&origin.CellErrors{Failed: map[int]error{2: refused}}, nil, down},
			wantFailed: []int{2, 4}},
		{name: "every master fails", errs: []error{down, down, down}, wantWhole: true},
		{name: "every cell refused alone",
			errs:       []error{&origin.CellErrors{Failed: map[int]error{0: refused, 2: refused}}, down, down},
			wantFailed: []int{0, 1, 2, 3, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			totals := []origin.Total{{Count: 10}, {Count: 11}, {Count: 12}, {Count: 13}, {Count: 14}}
			got, err := mergeGroups(OpApply, groups, tc.errs, totals)
			if tc.wantWhole {
				var cells *origin.CellErrors
				if got != nil || err == nil || errors.As(err, &cells) || !errors.Is(err, origin.ErrUnavailable) {
					t.Fatalf("mergeGroups = %v, %v; want no total and a whole, unavailable error", got, err)
				}
				return
			}
			if got == nil {
				t.Fatalf("mergeGroups returned no total: %v", err)
			}
			var cells *origin.CellErrors
			switch {
			case len(tc.wantFailed) == 0 && err != nil:
				t.Fatalf("err = %v, want none", err)
			case len(tc.wantFailed) > 0 && !errors.As(err, &cells):
				t.Fatalf("err = %v, want an *origin.CellErrors", err)
			case len(tc.wantFailed) > 0:
				if failed := slices.Sorted(maps.Keys(cells.Failed)); !slices.Equal(failed, tc.wantFailed) {
					t.Fatalf("failed cells %v, want %v", failed, tc.wantFailed)
				}
				for _, i := range tc.wantFailed {
					if !errors.Is(cells.Failed[i], origin.ErrUnavailable) && !errors.Is(cells.Failed[i], ErrBadValue) {
						t.Errorf("cell %d: %v, want its master's or its own error", i, cells.Failed[i])
					}
				}
			}
		})
	}
}
