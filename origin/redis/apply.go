package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/origin"
)

// Apply raises each delta's writer share with the raise script and returns
// the totals in the order of deltas: one EVALSHA for all the cells on a
// client of one server, one per cell on a Redis Cluster (EVAL for the
// cells Redis answers NOSCRIPT). Each cell's raise and expiry
// (max(TTLWindows × duration, MinTTL)) are one atomic step, and idempotent:
// a retry of a call whose reply was lost changes nothing it already did.
//
// A cell Redis refuses on its own (a key that is not a Sluice hash, a total
// past 2^53-1) fails alone: the others are applied and the error wraps an
// [*origin.CellErrors] naming it. Such failures do not count against the
// breaker.
//
// On a Redis Cluster the cells go to their masters at once, one pipeline
// per master through that master's breaker, and Apply returns when every
// master has answered or failed. A master that fails (a timeout, a lost
// connection, an open breaker) fails its own cells alone: the others are
// applied, and the error wraps an [*origin.CellErrors] whose entries for
// that master's cells wrap its error (origin.ErrUnavailable for an
// outage). Only when every master of the call failed as a whole does Apply
// fail as a whole, with no total.
func (o *Origin) Apply(ctx context.Context, deltas []origin.Delta) ([]origin.Total, error) {
	if len(deltas) == 0 {
		return []origin.Total{}, nil
	}
	keys := make([]string, len(deltas))
	for i := range deltas {
		if err := checkKey(deltas[i].Cell.Key); err != nil {
			return nil, fmt.Errorf("%w (apply, delta %d): %w", ErrInvalidCell, i, err)
		}
		keys[i] = CellKey(deltas[i].Cell)
	}
	totals := make([]origin.Total, len(deltas))
	groups := o.groups(ctx, keys)
	if len(groups) == 1 {
		err := o.do(ctx, OpApply, groups[0].route, len(deltas), func(ctx context.Context) error {
			return o.apply(ctx, keys, deltas, totals)
		})
		if err != nil && !errors.Is(err, origin.ErrCells) {
			return nil, err
		}
		return totals, err
	}
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i := 1; i < len(groups); i++ {
		wg.Go(func() { errs[i] = o.applyGroup(ctx, groups[i], keys, deltas, totals) })
	}
	errs[0] = o.applyGroup(ctx, groups[0], keys, deltas, totals)
	wg.Wait()
	return mergeGroups(OpApply, groups, errs, totals)
}

// A group is the cells of an Apply that go through one breaker: those one
// master of a Redis Cluster serves, or every cell.
type group struct {
	route route
	cells []int // indexes of the group's deltas, in order
}

// groups splits the cells of keys by the master that serves them. A client
// of one server, or a cluster client that has no slot map yet, makes one
// group of every cell.
func (o *Origin) groups(ctx context.Context, keys []string) []group {
	if o.shards.cluster == nil {
		return []group{{route: o.shards.route(ctx, keys[0]), cells: allCells(len(keys))}}
	}
	var gs []group
	for i, k := range keys {
		r := o.shards.route(ctx, k)
		if r.learn != "" {
			return []group{{route: r, cells: allCells(len(keys))}}
		}
		j := slices.IndexFunc(gs, func(g group) bool { return g.route.shard == r.shard })
		if j < 0 {
			j = len(gs)
			gs = append(gs, group{route: r})
		}
		gs[j].cells = append(gs[j].cells, i)
	}
	return gs
}

// allCells returns the indexes 0 to n-1.
func allCells(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// applyGroup applies the cells of g, writes their totals into totals and
// returns the call's error: a whole failure, or a [*origin.CellErrors]
// whose indexes are those of deltas.
func (o *Origin) applyGroup(ctx context.Context, g group, keys []string, deltas []origin.Delta, totals []origin.Total) error {
	gKeys := make([]string, len(g.cells))
	gDeltas := make([]origin.Delta, len(g.cells))
	for j, i := range g.cells {
		gKeys[j], gDeltas[j] = keys[i], deltas[i]
	}
	gTotals := make([]origin.Total, len(g.cells))
	err := o.do(ctx, OpApply, g.route, len(g.cells), func(ctx context.Context) error {
		return o.apply(ctx, gKeys, gDeltas, gTotals)
	})
	var refused *origin.CellErrors
	if err != nil && !errors.As(err, &refused) {
		return err
	}
	for j, i := range g.cells {
		totals[i] = gTotals[j]
	}
	if refused == nil {
		return nil
	}
	failed := make(map[int]error, len(refused.Failed))
	for j, cellErr := range refused.Failed {
		failed[g.cells[j]] = cellErr
	}
	return &origin.CellErrors{Failed: failed}
}

// mergeGroups returns the result of an Apply (or a LoadMany: op names
// it) whose groups ended with errs: the totals and a [*origin.CellErrors]
// naming every cell that failed, or, when every group failed as a whole,
// no total and their errors.
func mergeGroups[T any](op Op, groups []group, errs []error, totals []T) ([]T, error) {
	failed := map[int]error{}
	var whole []error
	for gi, err := range errs {
		var refused *origin.CellErrors
		switch {
		case err == nil:
		case errors.As(err, &refused):
			for i, cellErr := range refused.Failed {
				failed[i] = cellErr
			}
		default:
			whole = append(whole, err)
			for _, i := range groups[gi].cells {
				failed[i] = err
			}
		}
	}
	switch {
	case len(whole) == len(groups):
		return nil, fmt.Errorf("redis: %s: every master failed: %w", op, errors.Join(whole...))
	case len(failed) > 0:
		return totals, fmt.Errorf("redis: %s: %w", op, &origin.CellErrors{Failed: failed})
	default:
		return totals, nil
	}
}

// maxScriptCells bounds the cells of one call of the raise script, so that
// no call holds Redis for long (a few microseconds a cell) whatever the
// limiter's ReplayBatch.
const maxScriptCells = 256

// apply runs the raise script over the deltas, all its calls in one
// pipeline: calls of up to maxScriptCells cells when the client talks to
// one server (a *goredis.Client, with or without Sentinel), and one call
// per cell otherwise, since the cells of a Redis Cluster live in different
// slots. Calls Redis answers NOSCRIPT were not run and go again with EVAL.
func (o *Origin) apply(ctx context.Context, keys []string, deltas []origin.Delta, totals []origin.Total) error {
	per := 1
	if _, single := o.client.(*goredis.Client); single {
		per = maxScriptCells
	}
	args := make([]any, 0, 3*len(deltas))
	for _, d := range deltas {
		args = append(args, writerField(d.Writer), d.Sent, o.ttl(d.Cell.Duration))
	}
	// send queues call j (cells j*per up to (j+1)*per) on p, with EVALSHA,
	// or with EVAL after a NOSCRIPT answer.
	send := func(p goredis.Pipeliner, j int, withSha bool) *goredis.Cmd {
		from, to := j*per, min((j+1)*per, len(keys))
		if withSha {
			return p.EvalSha(ctx, raiseScript.Hash(), keys[from:to], args[3*from:3*to]...)
		}
		return raiseScript.Eval(ctx, p, keys[from:to], args[3*from:3*to]...)
	}
	cmds := o.runCalls(ctx, (len(keys)+per-1)/per, send)
	return collectTotals(len(keys), func(i int) (any, error) {
		replies, err := cmds[i/per].Slice()
		if err != nil {
			return nil, err
		}
		if want := min(per, len(keys)-i/per*per); len(replies) != want {
			return fmt.Sprintf("raise returned %d values for %d cells", len(replies), want), nil
		}
		return replies[i%per], nil
	}, totals)
}

// runCalls sends n script calls in one pipeline, each with EVALSHA
// (send(p, j, true) queues call j on p), then again with EVAL those Redis
// answered NOSCRIPT, in a second pipeline, and returns the calls' commands,
// whose errors the caller inspects.
func (o *Origin) runCalls(ctx context.Context, n int, send func(p goredis.Pipeliner, j int, withSha bool) *goredis.Cmd) []*goredis.Cmd {
	cmds := make([]*goredis.Cmd, n)
	pipe := o.client.Pipeline()
	for j := range cmds {
		cmds[j] = send(pipe, j, true)
	}
	_ = execPipeline(ctx, pipe) // each command's error is inspected by the caller
	if slices.ContainsFunc(cmds, func(c *goredis.Cmd) bool { return isNoScript(c.Err()) }) {
		retry := o.client.Pipeline()
		for j, c := range cmds { // EVAL also caches the script for the next EVALSHA
			if isNoScript(c.Err()) {
				cmds[j] = send(retry, j, false)
			}
		}
		_ = execPipeline(ctx, retry)
	}
	return cmds
}

// parseTotal reads one cell's reply of the raise script: its total and its
// imported count.
func parseTotal(v any) (origin.Total, bool) {
	pair, ok := v.([]any)
	if !ok || len(pair) != 2 {
		return origin.Total{}, false
	}
	n, ok1 := pair[0].(int64)
	imp, ok2 := pair[1].(int64)
	return origin.Total{Count: n, Imported: imp}, ok1 && ok2
}

// collectTotals reads the reply of each of n cells into totals. A connection
// or server-wide failure fails the call; a cell the script refused (it
// answers a string), or whose reply is not one integer, fails that cell
// only, reported in a [*origin.CellErrors].
func collectTotals(n int, reply func(i int) (any, error), totals []origin.Total) error {
	var failed map[int]error
	for i := range n {
		v, err := reply(i)
		switch total, ok := parseTotal(v); {
		case err == nil && ok:
			totals[i] = total
			continue
		case err == nil:
			err = fmt.Errorf("%w: %v", ErrBadValue, v)
		case classify(err) != OutcomeError:
			return err
		default:
			err = fmt.Errorf("%w: %w", ErrBadValue, err)
		}
		if failed == nil {
			failed = map[int]error{}
		}
		failed[i] = err
	}
	if failed != nil {
		return &origin.CellErrors{Failed: failed}
	}
	return nil
}
