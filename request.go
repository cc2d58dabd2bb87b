package sluice

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/window"
	"github.com/sluicehq/sluice/origin"
)

// ErrInvalidRequest is returned, wrapped with the reason, for a request that
// cannot be decided: a negative limit or cost, an empty namespace or
// identifier, a duration under one millisecond, or a time before the Unix
// epoch. Check for it with errors.Is. An invalid request is never a denial and
// changes no counter.
var ErrInvalidRequest = errors.New("sluice: invalid request")

// Request asks whether Cost units may be spent on one counter.
//
// The counter is identified by (Workspace, Namespace, Identifier, Duration);
// the limit is not part of the identity, so requests with different limits on
// one identity share one count.
type Request struct {
	// Workspace is the tenant. "" is allowed in the library.
	Workspace string
	// Namespace groups identifiers, for example "api.requests". Required.
	Namespace string
	// Identifier is who is limited, for example a user or an IP. Required.
	Identifier string
	// Limit is the number of units the sliding window admits. 0 denies every
	// request that costs something.
	Limit int64
	// Duration is the window length. Sub-millisecond parts are truncated; it
	// must be at least one millisecond.
	Duration time.Duration
	// Cost is the number of units this request spends. 0 peeks: the decision
	// is made and reported, but nothing is counted.
	Cost int64
	// Time is the instant of the request. The zero value means the limiter's
	// clock.
	Time time.Time
}

// Response is the sliding window's answer to a [Request].
type Response struct {
	// Success reports whether the request passed (and, unless it was a peek,
	// was counted).
	Success bool
	// Limit echoes the request's limit.
	Limit int64
	// Remaining is max(0, Limit-Current).
	Remaining int64
	// Current is the window's usage after this request: the current cell plus
	// the weighted previous cell, plus Cost when the request passed.
	Current int64
	// Reset is the end of the current fixed window cell.
	Reset time.Time
}

// resolved is a validated request located in its window.
type resolved struct {
	cell  origin.Cell // the current cell: the counter's key, pos.Seq
	pos   window.Position
	t     int64 // Unix ms
	limit int64
	cost  int64
	hash  uint64 // hash of cell.Key, set by the limiter
}

// resolve validates r and places it in its window; nowMilli supplies the
// time, in Unix milliseconds, when r.Time is zero.
func resolve(q *resolved, r *Request, nowMilli func() int64) error {
	var problem string
	d := r.Duration.Milliseconds()
	switch {
	case r.Namespace == "":
		problem = "namespace is empty"
	case r.Identifier == "":
		problem = "identifier is empty"
	case r.Limit < 0:
		problem = fmt.Sprintf("limit %d is negative", r.Limit)
	case r.Cost < 0:
		problem = fmt.Sprintf("cost %d is negative", r.Cost)
	case d < 1:
		problem = fmt.Sprintf("duration %v is under one millisecond", r.Duration)
	}
	if problem != "" {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, problem)
	}
	var t int64
	if r.Time.IsZero() {
		t = nowMilli()
	} else {
		t = r.Time.UnixMilli()
	}
	if t < 0 {
		return fmt.Errorf("%w: time %v is before the Unix epoch", ErrInvalidRequest, time.UnixMilli(t))
	}
	q.pos = window.At(t, d)
	// Field by field rather than a composite literal: the literal is built
	// on the stack and copied in wide moves that stall on its narrow
	// stores (docs/benchmarks/decision-path.md).
	q.cell.Workspace, q.cell.Namespace, q.cell.Identifier = r.Workspace, r.Namespace, r.Identifier
	q.cell.Duration = time.Duration(d) * time.Millisecond
	q.cell.Sequence = q.pos.Seq
	q.t, q.limit, q.cost = t, r.Limit, r.Cost
	return nil
}

// response fills res with the Response of a decision, field by field (a
// composite literal would be built aside and copied, see resolve).
func (q *resolved) response(res *Response, o window.Outcome) {
	res.Success, res.Limit, res.Remaining, res.Current = o.Success, q.limit, o.Remaining, o.Current
	res.Reset = time.UnixMilli(q.pos.Reset())
}

// current is the cell q falls in.
func (q *resolved) current() origin.Cell {
	return q.cell
}

// previous is the cell before it, weighted by the sliding window.
func (q *resolved) previous() origin.Cell {
	return origin.Cell{Key: q.cell.Key, Sequence: q.pos.Seq - 1}
}
