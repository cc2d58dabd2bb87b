package cluster

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice/origin"
)

var _ origin.BatchLoader = (*Origin)(nil)

// LoadMany returns the totals of each cell of cells and the one before it
// (see [origin.BatchLoader]): the cells this node owns are read from its
// store in one step, those another node owns with one [Origin.Load] each
// (the peers' protocol reads one counter a call), all at once. A cell
// whose owner could not be reached, or whose key is too long, fails alone:
// the error wraps an [*origin.CellErrors] naming it. When every cell
// failed, LoadMany fails as a whole, with no counts.
func (o *Origin) LoadMany(ctx context.Context, cells []origin.Cell) ([]origin.Counts, error) {
	if err := o.checkOpen(); err != nil {
		return nil, err
	}
	counts := make([]origin.Counts, len(cells))
	errs := make([]error, len(cells))
	var local []int
	var wg sync.WaitGroup
	for i, c := range cells {
		switch err := checkKey(c.Key); {
		case err != nil:
			errs[i] = err
		case o.route(c.Key) == nil:
			local = append(local, i)
		default:
			wg.Go(func() { counts[i], errs[i] = o.Load(ctx, c.Key, c.Sequence) })
		}
	}
	o.loadLocal(ctx, cells, local, counts, errs)
	wg.Wait()
	failed := map[int]error{}
	for i, err := range errs {
		if err != nil {
			failed[i] = err
		}
	}
	switch {
	case len(failed) == 0:
		return counts, nil
	case len(failed) == len(cells):
		return nil, fmt.Errorf("cluster: load: every cell failed: %w", errs[0])
	default:
		return counts, fmt.Errorf("cluster: load: %w", &origin.CellErrors{Failed: failed})
	}
}

// loadLocal reads the cells of cells at indexes idx, which this node
// owns, from its store in one step, and fills in their counts, or their
// errors, and what this node has seen of them.
func (o *Origin) loadLocal(ctx context.Context, cells []origin.Cell, idx []int, counts []origin.Counts, errs []error) {
	if len(idx) == 0 {
		return
	}
	mine := make([]origin.Cell, len(idx))
	for j, i := range idx {
		mine[j] = cells[i]
	}
	o.seedMu.RLock()
	read, err := o.store.LoadMany(ctx, mine)
	o.seedMu.RUnlock()
	for j, i := range idx {
		if err != nil {
			errs[i] = err
			continue
		}
		counts[i] = read[j]
		o.seen.record(mine[j], read[j].Current, read[j].Imported.Current)
		o.seen.record(origin.Cell{Key: mine[j].Key, Sequence: mine[j].Sequence - 1}, read[j].Previous, read[j].Imported.Previous)
	}
}
