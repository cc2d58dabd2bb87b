// Package origin defines the regional origin: the store that converges the
// nodes of one region (Redis, a peer cluster, or memory for one node).
//
// The limiter decides from local memory and talks to its origin only
// asynchronously (replay of accepted increments) or, for a cold counter and in
// strict mode, through one bounded synchronous read. An Origin therefore never
// sits on the warm request path, and an Origin that fails only degrades the
// limiter to local decisions.
//
// Implementations live in their own packages: [memory] for one process, redis
// for a region sharing a Redis deployment.
package origin

import (
	"context"
	"errors"
	"time"
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
}
