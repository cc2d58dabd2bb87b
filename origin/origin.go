// Package origin defines the regional origin: the store that converges the
// nodes of one region (Redis, a peer cluster, or memory for one node).
//
// The limiter decides from local memory and talks to its origin
// asynchronously (replay of accepted increments) or through one bounded
// synchronous call: a read for a cold counter or a stale one, and, while a
// counter is in strict mode after a denial, an atomic decision ([Origin.Decide])
// for a request its local view would admit. An Origin therefore never sits on
// the warm request path, never on a denial, and an Origin that fails only
// degrades the limiter to local decisions.
//
// # Exactly once
//
// A write never says "add n": it says "writer w has counted s in this cell
// so far" ([Delta], [Check]). A cell's total is the sum over its writers of
// the highest count each has sent, a grow-only counter, and an origin adds
// to the total only what a writer's count rose by. Sending the same count
// twice, or an older count after a newer one, changes nothing, so a call
// whose outcome is unknown (a timeout, a lost reply, a partial pipeline)
// is simply sent again, and no increment is ever counted twice. A writer is
// one incarnation of one cell in one limiter: its count starts at zero and
// only grows.
//
// Implementations live in their own packages: [memory] for one process, redis
// for a region sharing a Redis deployment.
package origin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/window"
)

// ErrUnavailable reports that the origin cannot serve a call right now (for
// example because its circuit breaker is open). Callers fall back to local
// state; it is never surfaced to a rate-limit caller.
var ErrUnavailable = errors.New("origin: unavailable")

// Key identifies one counter: (workspace, namespace, identifier, duration).
// The limit is deliberately not part of the identity. Duration is always a
// whole, positive number of milliseconds.
type Key struct {
	Workspace  string
	Namespace  string
	Identifier string
	Duration   time.Duration
}

// Cell is one fixed window cell of a counter: the window that starts at
// Sequence*Duration milliseconds after the Unix epoch.
type Cell struct {
	Key
	Sequence int64
}

// Writer identifies one writer of a cell: one incarnation of the cell in one
// limiter. Limiters draw writers at random, so two never share one.
type Writer uint64

// Delta is the count one writer has accumulated in one cell: every
// increment it ever admitted there, not only the ones since its last write.
type Delta struct {
	Cell   Cell
	Writer Writer
	// Sent is the writer's count of the cell so far (>= 0). An origin
	// raises the writer's share of the cell to Sent and the cell's total by
	// the difference; a Sent at or below the share already held changes
	// nothing.
	Sent int64
}

// ErrCells is returned, wrapped in a [*CellErrors], by [Origin.Apply] when
// some cells failed and the others were applied.
var ErrCells = errors.New("origin: some cells failed")

// CellErrors reports the cells of an [Origin.Apply] that failed while the
// others were applied: Failed maps the index of each failed delta to its
// error. The totals of the failed cells are 0.
type CellErrors struct {
	Failed map[int]error
}

// Error implements error.
func (e *CellErrors) Error() string {
	if len(e.Failed) == 0 {
		return "origin: no cell failed"
	}
	first := slices.Min(slices.Collect(maps.Keys(e.Failed)))
	return fmt.Sprintf("origin: %d cells failed (delta %d: %v)", len(e.Failed), first, e.Failed[first])
}

// Unwrap makes errors.Is(err, ErrCells) hold.
func (e *CellErrors) Unwrap() error { return ErrCells }

// Counts holds the origin's totals for the current cell of a counter and the
// one before it, the two cells a sliding-window decision reads.
type Counts struct {
	Current  int64
	Previous int64
	// Imported is the other regions' count of both cells as the region's
	// leader imported it into the origin ([Region.Import]): zero for an
	// origin that imports nothing. It is never part of Current or
	// Previous, and never published as the region's own.
	Imported Imported
}

// Imported is the other regions' count of the current cell of a counter and
// of the one before it.
type Imported struct {
	Current  int64
	Previous int64
}

// Total is what [Origin.Apply] returns for one cell: its total after the
// call and the other regions' count imported into the origin (see
// [Counts.Imported]).
type Total struct {
	Count    int64
	Imported int64
}

// Origin is the regional store behind a limiter. Implementations must be safe
// for concurrent use by many goroutines.
type Origin interface {
	// Load returns the totals of cells seq and seq-1 of key, read in one
	// round trip. A cell the origin does not know counts as zero.
	Load(ctx context.Context, key Key, seq int64) (Counts, error)

	// Apply raises every delta's writer share of its cell to the delta's
	// Sent, and the cell's total by as much, and returns each cell's total
	// after it, in the order of deltas. Raising and setting the cell's
	// expiry (at least three windows) happen as one atomic step per cell.
	// Each Total also carries the cell's imported count, so that a node
	// learns the other regions' counts with its replay.
	// Apply is idempotent: the caller sends a delta again, as it is or with
	// a higher Sent, until it succeeds. If some cells failed and the others
	// were applied, the error wraps a [*CellErrors] naming the failed ones;
	// on any other error no total is returned.
	Apply(ctx context.Context, deltas []Delta) ([]Total, error)

	// Decide makes the strict-mode decisions of c in one atomic step: it
	// raises c.Writer's share of cell c.Seq to c.Sent, as Apply does, reads
	// cells c.Seq and c.Seq-1, and decides each of c.Asks in order with the
	// sliding window (its usage includes c.Imported and the asks admitted
	// before it), adding the cost of each admitted ask to cell c.Seq and to
	// the writer's share. No other call on the counter's cells interleaves,
	// so two nodes can never both spend the last unit. The expiry rule of
	// Apply holds.
	//
	// If the writer's share was already above c.Sent, the check is stale: a
	// later write of the writer landed first, so this call may be a late
	// copy of one the writer gave up on, whose requests were decided
	// elsewhere. A stale check admits nothing and says so
	// ([Verdict.Stale]). On error nothing is known: the caller decides
	// locally, and its next write (a higher Sent) counts each of its
	// admissions once whether or not this call landed.
	Decide(ctx context.Context, c Check) (Verdict, error)

	// Withdraw takes writer's share of cell out of the cell's total and
	// marks the writer withdrawn there: its share becomes [Withdrawn], so a
	// later Apply of it changes nothing and a later Decide of it is stale
	// and admits nothing, even one sent before Withdraw that lands after
	// it. A cell the origin does not know is created with the mark (and the
	// expiry rule of Apply). Withdraw is idempotent: the caller sends it
	// again until it succeeds. A limiter withdraws the writer that reserved
	// a batch's units at the origin when the batch is rolled back (see
	// sluice's RatelimitMany).
	Withdraw(ctx context.Context, cell Cell, writer Writer) error
}

// BatchLoader is implemented by an origin that reads several counters in
// one round trip. A limiter whose origin is a BatchLoader hydrates the cold
// counters of one RatelimitMany batch with one LoadMany instead of one
// Load each. An origin that wraps a BatchLoader by embedding it and
// changes Load must change LoadMany alike (or not offer it): the limiter
// calls whichever its origin has.
type BatchLoader interface {
	// LoadMany returns, for each cell of cells in order, what
	// Load(ctx, cell.Key, cell.Sequence) returns: the totals of the cell
	// and of the one before it. If some cells failed and the others were
	// read, the error wraps a [*CellErrors] naming the failed ones (their
	// Counts are zero); on any other error no Counts are returned.
	LoadMany(ctx context.Context, cells []Cell) ([]Counts, error)
}

// Withdrawn is the share a withdrawn writer holds in a cell (see
// [Origin.Withdraw]): above every count a writer sends, and exact in a
// Redis script's doubles.
const Withdrawn int64 = 1<<53 - 1

// Pusher is implemented by an origin that sends counts to the limiters of
// its region without being asked: the cluster origin broadcasts the total of
// a cell that went over its limit, so that every node denies it locally
// with no origin call. sluice.New registers the limiter it builds with its
// origin when the origin is a Pusher.
type Pusher interface {
	// OnPush sets the function that receives pushed totals, replacing the
	// one set before: f raises the local view of cell to total (never
	// lowers it), must be safe for concurrent use, and returns at once.
	OnPush(f func(cell Cell, total int64))
}

// Ask is one request decided by [Origin.Decide].
type Ask struct {
	Limit int64 // >= 0
	Cost  int64 // >= 1
}

// Check is a batch of strict-mode requests on one counter, decided by
// [Origin.Decide] at one instant.
type Check struct {
	Key Key
	// Seq is the current cell and Elapsed the milliseconds into it
	// (0 <= Elapsed < Duration): the previous cell weighs
	// floor(prev * (Duration-Elapsed) / Duration).
	Seq     int64
	Elapsed int64
	// Writer and Sent are the writer's count of cell Seq so far (see
	// [Delta]), raised first, unconditionally.
	Writer Writer
	Sent   int64
	// Imported is what the decision counts beside the origin's totals and
	// never stores: the other regions' count of both cells as the caller
	// knows it (and, for a batch, its units not sent yet).
	Imported Imported
	// Holder, when not zero, makes the check a reservation: the costs the
	// asks admit go to Holder's share instead of Writer's, so that
	// [Origin.Withdraw] of Holder takes them back whole, and Writer's
	// share is not raised: what Sent exceeds it by counts as spent in the
	// decision, and is not stored. Holder must be a writer of its own,
	// drawn for the check: if its share is not zero (written or withdrawn
	// already), the check is stale and admits nothing.
	Holder Writer
	// Asks are decided in order.
	Asks []Ask
}

// Verdict is the answer of [Origin.Decide].
type Verdict struct {
	// Admitted says, for each ask in order, whether it passed (and was
	// added).
	Admitted []bool
	// Counts are the origin's totals of both cells after the step, Sent
	// and the admitted costs included, and the counts imported into the
	// origin (Counts.Imported), not the check's.
	Counts Counts
	// Stale reports a check whose writer's share was above its Sent, or
	// whose Holder's share was not zero: it admitted nothing. Share is the
	// writer's share after the step.
	Stale bool
	Share int64
}

// Before returns the sliding-window usage of cells cur (current) and prev
// (previous) at c's instant, saturated at math.MaxInt64. Origins use it to
// decide exactly as the limiter does.
func (c Check) Before(cur, prev int64) int64 {
	return window.Position{Seq: c.Seq, Elapsed: c.Elapsed, D: c.Key.Duration.Milliseconds()}.Before(cur, prev)
}
