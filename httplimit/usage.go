package httplimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"time"
)

// ErrCannotReport is reported through Config.OnError when a handler added
// usage ([AddUsage]) but Config.Limiter is not a [Reporter]: the usage is
// not counted.
var ErrCannotReport = errors.New("httplimit: the limiter cannot report usage")

// usage is what the handlers of one request added with AddUsage.
type usage struct{ n atomic.Int64 }

// usageKey is the context key of a request's usage.
type usageKey struct{}

// AddUsage adds n units (0 or more) to what the request whose context is
// ctx spent beyond its Cost, a cost known only once the handler ran: the
// tokens a language model's answer used, the bytes a download sent. When
// the handler returns, the middleware reports the sum to the limiter
// ([Reporter]) on the request's counter: it is counted whole, even past
// the limit, so the key's next requests are denied until the window lets
// them through; it never changes the answer already written. AddUsage is
// safe for concurrent use, and reports whether the usage will be
// reported: false outside a request the middleware allowed (an unlimited
// one, one served while the limiter failed) and for a negative n.
//
// Set Config.Cost to what the request is known to spend before it runs
// (0 peeks: the request passes while anything is left), and add the rest
// here. A report the limiter cannot count goes to Config.OnError.
func AddUsage(ctx context.Context, n int64) bool {
	u, ok := ctx.Value(usageKey{}).(*usage)
	if !ok || n < 0 {
		return false
	}
	for {
		old := u.n.Load()
		next := old + n
		if next < old { // saturate rather than wrap
			next = math.MaxInt64
		}
		if u.n.CompareAndSwap(old, next) {
			return true
		}
	}
}

// Report counts cost on the counter of key under policy p as usage
// already spent, with l, which must be a [Reporter] (else the error wraps
// [ErrCannotReport]): never denied, counted whole even past the limit.
// The Result is the state after it, for the same fields [Check] gives.
// The middleware calls it with what handlers added through [AddUsage].
func Report(ctx context.Context, l Limiter, p Policy, key string, cost int64) (Result, error) {
	p = p.withDefaults()
	if err := p.Validate(); err != nil {
		return Result{}, err
	}
	rep, ok := l.(Reporter)
	switch {
	case !ok:
		return Result{}, fmt.Errorf("%w: %T is not a Reporter", ErrCannotReport, l)
	case key == "":
		return Result{}, ErrNoKey
	case cost < 0:
		return Result{}, fmt.Errorf("httplimit: cost %d is negative", cost)
	}
	d, err := rep.Report(ctx, Request{Namespace: p.Name, Identifier: identifier(key), Limit: p.Limit, Window: p.Window, Cost: cost})
	if err != nil {
		return Result{}, fmt.Errorf("httplimit: limiter: %w", err)
	}
	return Result{Policy: p, Decision: d, Cost: cost, At: time.Now()}, nil
}

// serveCounted serves an allowed request with next and then reports what
// its handlers added with AddUsage, if anything, on its counter. The
// report outlives the request's cancellation (the usage was spent all the
// same); its failure goes to Config.OnError.
func (m *Middleware) serveCounted(w http.ResponseWriter, r *http.Request, next http.Handler, p Policy, key string) {
	u := &usage{}
	r = r.WithContext(context.WithValue(r.Context(), usageKey{}, u))
	next.ServeHTTP(w, r)
	n := u.n.Load()
	if n == 0 {
		return
	}
	if _, err := Report(context.WithoutCancel(r.Context()), m.cfg.Limiter, p, key, n); err != nil {
		m.report(r, err)
	}
}
