package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/origin"
)

var _ origin.BatchLoader = (*Origin)(nil)

// LoadMany returns the totals and imported counts of each cell of cells
// and the one before it (see [origin.BatchLoader]): two HMGETs a cell, as
// [Origin.Load] sends, all in one pipeline on a client of one server; on a
// Redis Cluster one pipeline per master, sent at once, each through that
// master's breaker. A key or field that is missing counts as zero.
//
// A cell whose keys hold something that is not a Sluice cell fails alone
// (wrapping [ErrBadValue]), and so do the cells of a master that fails (a
// timeout, a lost connection, an open breaker): the others are read, and
// the error wraps an [*origin.CellErrors] naming the failed ones. Only
// when every master of the call failed as a whole does LoadMany fail as a
// whole, with no counts. An invalid cell (see [ErrInvalidCell]) fails the
// call before anything is sent.
func (o *Origin) LoadMany(ctx context.Context, cells []origin.Cell) ([]origin.Counts, error) {
	if len(cells) == 0 {
		return []origin.Counts{}, nil
	}
	cur, prev := make([]string, len(cells)), make([]string, len(cells))
	for i, c := range cells {
		if err := checkKey(c.Key); err != nil {
			return nil, fmt.Errorf("%w (load, cell %d): %w", ErrInvalidCell, i, err)
		}
		if c.Sequence == math.MinInt64 {
			return nil, fmt.Errorf("%w (load, cell %d): sequence %d has no previous cell", ErrInvalidCell, i, c.Sequence)
		}
		cur[i] = CellKey(c)
		prev[i] = CellKey(origin.Cell{Key: c.Key, Sequence: c.Sequence - 1})
	}
	counts := make([]origin.Counts, len(cells))
	groups := o.groups(ctx, cur) // a cell and the one before it share a slot
	if len(groups) == 1 {
		err := o.loadGroup(ctx, groups[0], cur, prev, counts)
		if err != nil && !errors.Is(err, origin.ErrCells) {
			return nil, err
		}
		return counts, err
	}
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i := 1; i < len(groups); i++ {
		wg.Go(func() { errs[i] = o.loadGroup(ctx, groups[i], cur, prev, counts) })
	}
	errs[0] = o.loadGroup(ctx, groups[0], cur, prev, counts)
	wg.Wait()
	return mergeGroups(OpLoad, groups, errs, counts)
}

// loadGroup reads the cells of g (indexes into cur and prev, the keys of
// each cell and of the one before it) through g's breaker, in one
// pipeline, and writes their counts into counts. It returns the call's
// error: a whole failure, or a [*origin.CellErrors] naming the cells whose
// keys hold something else, by their indexes in cur.
func (o *Origin) loadGroup(ctx context.Context, g group, cur, prev []string, counts []origin.Counts) error {
	return o.do(ctx, OpLoad, g.route, 2*len(g.cells), func(ctx context.Context) error {
		pipe := o.client.Pipeline()
		type reads struct{ cur, prev *goredis.SliceCmd }
		cmds := make([]reads, len(g.cells))
		for j, i := range g.cells {
			cmds[j].cur = pipe.HMGet(ctx, cur[i], totalField, importedField)
			cmds[j].prev = pipe.HMGet(ctx, prev[i], totalField, importedField)
		}
		if err := execPipeline(ctx, pipe); err != nil && classify(err) != OutcomeError {
			return err // the connection or the server failed: every cell
		}
		var failed map[int]error
		for j, i := range g.cells {
			c := &counts[i]
			var err error
			if c.Current, c.Imported.Current, err = parseCell(cmds[j].cur); err == nil {
				c.Previous, c.Imported.Previous, err = parseCell(cmds[j].prev)
			}
			if err != nil {
				*c = origin.Counts{}
				if failed == nil {
					failed = make(map[int]error)
				}
				failed[i] = err
			}
		}
		if failed != nil {
			return &origin.CellErrors{Failed: failed}
		}
		return nil
	})
}

// parseCell is parseCounts for a cell of LoadMany: a command Redis refused
// (the key holds another type) fails as a value that is not a cell's.
func parseCell(cmd *goredis.SliceCmd) (total, imported int64, err error) {
	total, imported, err = parseCounts(cmd)
	if err != nil && !errors.Is(err, ErrBadValue) {
		err = fmt.Errorf("%w: %w", ErrBadValue, err)
	}
	return total, imported, err
}
