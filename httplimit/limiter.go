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

// LimiterFunc adapts a function to [Limiter].
type LimiterFunc func(ctx context.Context, r Request) (Decision, error)

// Limit calls f.
func (f LimiterFunc) Limit(ctx context.Context, r Request) (Decision, error) { return f(ctx, r) }

// Embedded is a [Limiter] deciding in this process with l (in its
// workspace ""). Its counts are shared with other processes through l's
// origin, if it has one.
func Embedded(l *sluice.Limiter) Limiter {
	return LimiterFunc(func(ctx context.Context, r Request) (Decision, error) {
		res, err := l.Ratelimit(ctx, sluice.Request{
			Namespace: r.Namespace, Identifier: r.Identifier, Limit: r.Limit, Duration: r.Window, Cost: r.Cost,
		})
		if err != nil {
			return Decision{}, err
		}
		return Decision{Allowed: res.Success, Limit: res.Limit, Remaining: res.Remaining, Reset: res.Reset}, nil
	})
}

// Remote is a [Limiter] asking a Sluice server through c, in the workspace
// of c's root key. The server's overrides of the namespace apply (the
// Decision's Limit is then the override's). The server takes windows of 1 s
// to 30 days in whole milliseconds.
func Remote(c *client.Client) Limiter {
	return LimiterFunc(func(ctx context.Context, r Request) (Decision, error) {
		res, err := c.Limit(ctx, client.LimitRequest{
			Namespace: r.Namespace, Identifier: r.Identifier, Limit: r.Limit, Duration: r.Window, Cost: r.Cost,
		})
		if err != nil {
			return Decision{}, err
		}
		return Decision{Allowed: res.Success, Limit: res.Limit, Remaining: res.Remaining, Reset: res.Reset}, nil
	})
}
