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
// Implementations live in their own packages: [memory] for one process, redis
// for a region sharing a Redis deployment.
package origin

import (
	"context"
	"errors"
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

// Delta is an increment of one cell, accumulated locally and replayed to the
// origin in one step.
type Delta struct {
	Cell  Cell
	Count int64
}

// Counts holds the origin's totals for the current cell of a counter and the
// one before it, the two cells a sliding-window decision reads.
type Counts struct {
	Current  int64
	Previous int64
}

// Origin is the regional store behind a limiter. Implementations must be safe
// for concurrent use by many goroutines.
type Origin interface {
	// Load returns the totals of cells seq and seq-1 of key, read in one
	// round trip. A cell the origin does not know counts as zero.
	Load(ctx context.Context, key Key, seq int64) (Counts, error)

	// Apply adds every delta to its cell and returns each cell's total after
	// the addition, in the order of deltas. Applying and setting the cell's
	// expiry (at least three windows) happen as one atomic step per cell. On
	// error no total is returned; the caller keeps the deltas and retries.
	Apply(ctx context.Context, deltas []Delta) ([]int64, error)

	// Decide makes the strict-mode decisions of c in one atomic step: it
	// adds c.Pending to cell c.Seq, reads cells c.Seq and c.Seq-1, and
	// decides each of c.Asks in order with the sliding window (its usage
	// includes c.Imported and the asks admitted before it), adding the cost
	// of each admitted ask to cell c.Seq. No other call on the counter's
	// cells interleaves, so two nodes can never both spend the last unit.
	// The expiry rule of Apply holds. On error nothing is known: the caller
	// decides locally and keeps c.Pending for replay (which may then count
	// twice, as a retried Apply may).
	Decide(ctx context.Context, c Check) (Verdict, error)
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
	// Pending is what this node admitted on cell Seq and has not applied
	// yet; it is added first, unconditionally.
	Pending int64
	// Imported is the other regions' count of both cells: it takes part in
	// the decision and is never stored.
	Imported Counts
	// Asks are decided in order.
	Asks []Ask
}

// Verdict is the answer of [Origin.Decide].
type Verdict struct {
	// Admitted says, for each ask in order, whether it passed (and was
	// added).
	Admitted []bool
	// Counts are the origin's totals of both cells after the step, Pending
	// and the admitted costs included, Imported not.
	Counts Counts
}

// Before returns the sliding-window usage of cells cur (current) and prev
// (previous) at c's instant, saturated at math.MaxInt64. Origins use it to
// decide exactly as the limiter does.
func (c Check) Before(cur, prev int64) int64 {
	return window.Position{Seq: c.Seq, Elapsed: c.Elapsed, D: c.Key.Duration.Milliseconds()}.Before(cur, prev)
}
