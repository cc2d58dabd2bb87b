package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"
)

// maxPageSize is the most overrides one listOverrides page holds.
const maxPageSize = 100

// LimitRequest asks whether Cost units may be spent on one counter. Its
// fields mean what those of sluice.Request mean.
type LimitRequest struct {
	// Namespace groups identifiers; it is created on first use. Its name or
	// its id.
	Namespace string
	// Identifier is who is limited, for example a user or an IP.
	Identifier string
	// Limit is the number of units the sliding window admits.
	Limit int64
	// Duration is the window length, in whole milliseconds, 1 s to 30 days.
	Duration time.Duration
	// Cost is the number of units this request spends. 0 peeks, as in the
	// library: the decision is reported, nothing is counted. (The API
	// counts 1 when cost is absent; this client always sends it.)
	Cost int64
}

// limitBody is the JSON of a LimitRequest.
type limitBody struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Duration   int64  `json:"duration"`
	Cost       int64  `json:"cost"`
}

func (r LimitRequest) body() limitBody {
	return limitBody{Namespace: r.Namespace, Identifier: r.Identifier, Limit: r.Limit, Duration: r.Duration.Milliseconds(), Cost: r.Cost}
}

// LimitResponse is the decision on one [LimitRequest].
type LimitResponse struct {
	// Success reports whether the request passed (and, unless it peeked,
	// was counted). A denial counts nothing.
	Success bool
	// Limit is the limit applied: the request's, or its override's.
	Limit int64
	// Remaining is what is left of the limit after this request.
	Remaining int64
	// Reset is the end of the current fixed window cell, by the server's
	// clock. A retry at Reset may still be denied: a window's usage fades
	// through the next window.
	Reset time.Time
	// OverrideID is the id of the override applied, if any.
	OverrideID string
	// RequestID is the server's id of the call.
	RequestID string
}

// limitData is the data of a limit answer.
type limitData struct {
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	Reset      int64  `json:"reset"`
	Success    bool   `json:"success"`
	OverrideID string `json:"overrideId"`
}

// Limit decides one request. A denial is a response whose Success is
// false, not an error. Limit is retried only when no connection could be
// made (see the package documentation).
func (c *Client) Limit(ctx context.Context, r LimitRequest) (LimitResponse, error) {
	return c.one(ctx, epLimit, r)
}

// Report counts r.Cost on r's counter as usage already spent
// (ratelimit.report): the tokens an answer used, known once it is
// served. It is never denied and counts its whole cost, even past the
// limit; the response is the state after it (Success true, Remaining 0
// once the limit is spent). Like Limit, it counts, so it is retried only
// when no connection could be made: an error after that means the report
// may or may not have been counted.
func (c *Client) Report(ctx context.Context, r LimitRequest) (LimitResponse, error) {
	return c.one(ctx, epReport, r)
}

// one sends r to ep, limit or report, and decodes the answer.
func (c *Client) one(ctx context.Context, ep endpoint, r LimitRequest) (LimitResponse, error) {
	var d limitData
	oc, err := c.call(ctx, ep, r.body(), &d)
	if err != nil {
		return LimitResponse{}, err
	}
	return LimitResponse{
		Success:    d.Success,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		Reset:      time.UnixMilli(d.Reset),
		OverrideID: d.OverrideID,
		RequestID:  oc.env.Meta.RequestID,
	}, nil
}

// Check is the decision on one request of a [Client.MultiLimit] call.
type Check struct {
	// Namespace and Identifier echo the request.
	Namespace, Identifier string
	// Passed reports whether this request alone would pass; it was counted
	// only if every request of the call passed.
	Passed bool
	// Limit, Remaining, Reset and OverrideID are those of [LimitResponse].
	Limit, Remaining int64
	Reset            time.Time
	OverrideID       string
}

// MultiLimitResponse is the decision on a [Client.MultiLimit] call.
type MultiLimitResponse struct {
	// Passed reports whether every request passed, and so was counted.
	Passed bool
	// Checks are the decisions, in the order of the requests.
	Checks []Check
	// RequestID is the server's id of the call.
	RequestID string
}

// multiData is the data of a multiLimit answer.
type multiData struct {
	Passed bool `json:"passed"`
	Limits []struct {
		Namespace  string `json:"namespace"`
		Identifier string `json:"identifier"`
		Limit      int64  `json:"limit"`
		Remaining  int64  `json:"remaining"`
		Reset      int64  `json:"reset"`
		Passed     bool   `json:"passed"`
		OverrideID string `json:"overrideId"`
	} `json:"limits"`
}

// MultiLimit decides 1 to 100 requests all or nothing: they are counted
// only if every one passes. Like [Client.Limit], it is retried only when no
// connection could be made.
func (c *Client) MultiLimit(ctx context.Context, rs []LimitRequest) (MultiLimitResponse, error) {
	return c.many(ctx, epMultiLimit, rs)
}

// MultiReport counts 1 to 100 reports (ratelimit.multiReport), each as
// [Client.Report] counts it: every one counts, in order, whatever the
// others do, and Passed is true. Like Report, it is retried only when no
// connection could be made.
func (c *Client) MultiReport(ctx context.Context, rs []LimitRequest) (MultiLimitResponse, error) {
	return c.many(ctx, epMultiReport, rs)
}

// many sends rs to ep, multiLimit or multiReport, and decodes the answer.
func (c *Client) many(ctx context.Context, ep endpoint, rs []LimitRequest) (MultiLimitResponse, error) {
	bodies := make([]limitBody, len(rs))
	for i, r := range rs {
		bodies[i] = r.body()
	}
	var d multiData
	oc, err := c.call(ctx, ep, bodies, &d)
	if err != nil {
		return MultiLimitResponse{}, err
	}
	out := MultiLimitResponse{Passed: d.Passed, Checks: make([]Check, len(d.Limits)), RequestID: oc.env.Meta.RequestID}
	for i, l := range d.Limits {
		out.Checks[i] = Check{
			Namespace: l.Namespace, Identifier: l.Identifier, Passed: l.Passed,
			Limit: l.Limit, Remaining: l.Remaining, Reset: time.UnixMilli(l.Reset), OverrideID: l.OverrideID,
		}
	}
	return out, nil
}

// Override replaces the limit and the duration of every request of its
// namespace whose identifier it matches.
type Override struct {
	// ID is the server's id of the override (rlor_…); set by the server,
	// ignored by [Client.SetOverride].
	ID string
	// Identifier is an exact identifier, or a pattern where each * matches
	// any run of bytes.
	Identifier string
	// Limit replaces the request's limit.
	Limit int64
	// Duration replaces the request's window, in whole milliseconds.
	Duration time.Duration
}

// overrideData is the JSON of an override.
type overrideData struct {
	OverrideID string `json:"overrideId"`
	Duration   int64  `json:"duration"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
}

func (d overrideData) override() Override {
	return Override{ID: d.OverrideID, Identifier: d.Identifier, Limit: d.Limit, Duration: time.Duration(d.Duration) * time.Millisecond}
}

// SetOverride creates the override o in namespace (creating the namespace
// on first use), or replaces the limit and duration of the one with its
// identifier, which keeps its id. It returns o with its ID. It is
// idempotent, and retried as the package documentation says.
func (c *Client) SetOverride(ctx context.Context, namespace string, o Override) (Override, error) {
	body := struct {
		Namespace  string `json:"namespace"`
		Identifier string `json:"identifier"`
		Limit      int64  `json:"limit"`
		Duration   int64  `json:"duration"`
	}{namespace, o.Identifier, o.Limit, o.Duration.Milliseconds()}
	var d struct {
		OverrideID string `json:"overrideId"`
	}
	if _, err := c.call(ctx, epSetOverride, body, &d); err != nil {
		return Override{}, err
	}
	o.ID = d.OverrideID
	return o, nil
}

// overrideRef is the JSON naming one override.
type overrideRef struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
}

// GetOverride returns the override of namespace whose identifier (or
// pattern) is exactly identifier; an error matching [ErrNotFound] if there
// is none or the namespace does not exist.
func (c *Client) GetOverride(ctx context.Context, namespace, identifier string) (Override, error) {
	var d overrideData
	if _, err := c.call(ctx, epGetOverride, overrideRef{namespace, identifier}, &d); err != nil {
		return Override{}, err
	}
	return d.override(), nil
}

// DeleteOverride deletes the override of namespace whose identifier (or
// pattern) is exactly identifier; an error matching [ErrNotFound] if there
// is none. When an earlier attempt of this call may have reached the
// server, a retry that finds no override reports success: that attempt
// deleted it.
func (c *Client) DeleteOverride(ctx context.Context, namespace, identifier string) error {
	var d struct{}
	oc, err := c.call(ctx, epDeleteOverride, overrideRef{namespace, identifier}, &d)
	var e *APIError
	if errors.As(err, &e) && e.Type == TypeOverrideNotFound && oc.reachedBefore {
		return nil
	}
	return err
}

// OverridePage is one page of a namespace's overrides.
type OverridePage struct {
	// Overrides are in bytewise order of their identifiers.
	Overrides []Override
	// Cursor, when HasMore, asks for the next page.
	Cursor string
	// HasMore reports whether overrides follow this page.
	HasMore bool
}

// ListOverridesPage returns up to limit (1 to 100; 0 for the server's
// default, 10) overrides of namespace following cursor ("" for the first
// page), in bytewise order of their identifiers. [Client.ListOverrides]
// walks every page.
func (c *Client) ListOverridesPage(ctx context.Context, namespace, cursor string, limit int) (OverridePage, error) {
	body := struct {
		Namespace string `json:"namespace"`
		Cursor    string `json:"cursor,omitempty"`
		Limit     int    `json:"limit,omitempty"`
	}{namespace, cursor, limit}
	var d []overrideData
	oc, err := c.call(ctx, epListOverrides, body, &d)
	if err != nil {
		return OverridePage{}, err
	}
	page := OverridePage{Overrides: make([]Override, len(d))}
	for i, o := range d {
		page.Overrides[i] = o.override()
	}
	if p := oc.env.Pagination; p != nil {
		page.Cursor, page.HasMore = p.Cursor, p.HasMore
	}
	return page, nil
}

// ListOverrides iterates over every override of namespace, in bytewise
// order of their identifiers, fetching a page at a time (see
// [WithPageSize]) as the loop goes on; breaking out of the loop fetches no
// more. An error ends the iteration: it is yielded once, with a zero
// Override. Overrides set or deleted during the iteration may or may not
// be seen.
func (c *Client) ListOverrides(ctx context.Context, namespace string) iter.Seq2[Override, error] {
	return func(yield func(Override, error) bool) {
		cursor := ""
		for {
			page, err := c.ListOverridesPage(ctx, namespace, cursor, c.pageSize)
			if err != nil {
				yield(Override{}, err)
				return
			}
			for _, o := range page.Overrides {
				if !yield(o, nil) {
					return
				}
			}
			if !page.HasMore {
				return
			}
			if page.Cursor == "" || page.Cursor == cursor {
				yield(Override{}, fmt.Errorf("client: %s: the server said more overrides follow but gave no new cursor", epListOverrides.op))
				return
			}
			cursor = page.Cursor
		}
	}
}
