package httplimit

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
)

// Limiter decides whether a request may spend its cost. [Embedded] and
// [Remote] adapt Sluice's two forms to it; [LimiterFunc] adapts a function.
type Limiter interface {
	// Limit decides r. A denial is a Decision whose Allowed is false; an
	// error means no decision was made.
	Limit(ctx context.Context, r Request) (Decision, error)
}

// Request asks whether Cost units may be spent on one counter, identified
// by (Namespace, Identifier, Window).
type Request struct {
	// Namespace is the policy's name.
	Namespace string
	// Identifier is the request's key.
	Identifier string
	// Limit is the number of units the window admits.
	Limit int64
	// Window is the length of the sliding window.
	Window time.Duration
	// Cost is what this request spends; 0 peeks.
	Cost int64
}

// Decision is a [Limiter]'s answer to a [Request].
type Decision struct {
	// Allowed reports whether the request passed (and was counted).
	Allowed bool
	// Limit is the limit applied: the request's, or a server's override.
	Limit int64
	// Remaining is what is left of the limit after this request.
	Remaining int64
	// Reset is the end of the current fixed window cell. A window's usage
	// fades through the next window, so a retry at Reset may be denied too.
	Reset time.Time
}

// Reporter is a [Limiter] that also counts usage after the fact: the
// Limiters of [Embedded] and [Remote] are Reporters, and the middleware
// reports through it what handlers add with [AddUsage].
type Reporter interface {
	Limiter
	// Report counts r.Cost on r's counter as usage already spent: never
	// denied, counted whole even past the limit. The Decision is the state
	// after it (Allowed true). An error means the report may not have
	// been counted.
	Report(ctx context.Context, r Request) (Decision, error)
}

// LimiterFunc adapts a function to [Limiter].
type LimiterFunc func(ctx context.Context, r Request) (Decision, error)

// Limit calls f.
func (f LimiterFunc) Limit(ctx context.Context, r Request) (Decision, error) { return f(ctx, r) }

// Embedded is a [Limiter] deciding in this process with l (in its
// workspace ""). Its counts are shared with other processes through l's
// origin, if it has one. It is a [Reporter] (sluice.Limiter.Report).
func Embedded(l *sluice.Limiter) Limiter { return embedded{l} }

// embedded is the Limiter of Embedded.
type embedded struct{ l *sluice.Limiter }

// Limit decides r with Ratelimit.
func (e embedded) Limit(ctx context.Context, r Request) (Decision, error) {
	return fromLibrary(e.l.Ratelimit(ctx, r.asLibrary()))
}

// Report counts r with Report.
func (e embedded) Report(ctx context.Context, r Request) (Decision, error) {
	return fromLibrary(e.l.Report(ctx, r.asLibrary()))
}

// asLibrary is r as a library request.
func (r Request) asLibrary() sluice.Request {
	return sluice.Request{Namespace: r.Namespace, Identifier: r.Identifier, Limit: r.Limit, Duration: r.Window, Cost: r.Cost}
}

// fromLibrary is a library answer as a Decision.
func fromLibrary(res sluice.Response, err error) (Decision, error) {
	if err != nil {
		return Decision{}, err
	}
	return Decision{Allowed: res.Success, Limit: res.Limit, Remaining: res.Remaining, Reset: res.Reset}, nil
}

// Remote is a [Limiter] asking a Sluice server through c, in the workspace
// of c's root key. The server's overrides of the namespace apply (the
// Decision's Limit is then the override's). The server takes windows of 1 s
// to 30 days in whole milliseconds. It is a [Reporter]
// (client.Client.Report, ratelimit.report).
func Remote(c *client.Client) Limiter { return remote{c} }

// remote is the Limiter of Remote.
type remote struct{ c *client.Client }

// Limit decides r with ratelimit.limit.
func (rm remote) Limit(ctx context.Context, r Request) (Decision, error) {
	return fromClient(rm.c.Limit(ctx, r.asClient()))
}

// Report counts r with ratelimit.report.
func (rm remote) Report(ctx context.Context, r Request) (Decision, error) {
	return fromClient(rm.c.Report(ctx, r.asClient()))
}

// asClient is r as a client request.
func (r Request) asClient() client.LimitRequest {
	return client.LimitRequest{Namespace: r.Namespace, Identifier: r.Identifier, Limit: r.Limit, Duration: r.Window, Cost: r.Cost}
}

// fromClient is a server's answer as a Decision.
func fromClient(res client.LimitResponse, err error) (Decision, error) {
	if err != nil {
		return Decision{}, err
	}
	return Decision{Allowed: res.Success, Limit: res.Limit, Remaining: res.Remaining, Reset: res.Reset}, nil
}
