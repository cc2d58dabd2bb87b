package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

var (
	// ErrInvalidConfig is returned, wrapped with the reason, by [New].
	ErrInvalidConfig = errors.New("httplimit: invalid config")
	// ErrInvalidPolicy is returned, wrapped with the reason, for a
	// [Policy] that cannot be applied: by [New] for Config.Policy, and
	// through Config.OnError for one a PolicyFunc returned.
	ErrInvalidPolicy = errors.New("httplimit: invalid policy")
	// ErrNoKey is wrapped by the error of a request whose key could not be
	// found (no header, a peer without an IP address). Such a request is
	// refused with 400.
	ErrNoKey = errors.New("httplimit: no key")
)

// Config configures a [Middleware].
type Config struct {
	// Limiter decides. Required: [Embedded] for a *sluice.Limiter,
	// [Remote] for a *client.Client.
	Limiter Limiter
	// Policy applies to every request, unless PolicyFunc is set.
	Policy Policy
	// PolicyFunc, if set, chooses each request's policy instead of Policy
	// (per route, per method, per plan). false leaves the request
	// unlimited: it is served without rate-limit fields.
	PolicyFunc func(r *http.Request) (Policy, bool)
	// Key returns a request's key. Default: ClientIP(TrustedProxies{}),
	// the connection's peer address.
	Key KeyFunc
	// Cost returns what a request spends, 0 or more, as it is decided.
	// Default: 1. A cost known only once the handler ran (the tokens of an
	// answer) is added by the handler with [AddUsage].
	Cost func(r *http.Request) int64
	// FailClosed refuses requests with 503 when the limiter fails (an
	// error, not a denial). By default the middleware fails open: the
	// request is served, without rate-limit fields, so that the limiter's
	// outage is not the service's.
	FailClosed bool
	// OnError, if set, is called with every error: the limiter's (then the
	// request is served or refused as FailClosed says), a key's ([ErrNoKey]:
	// refused with 400), a PolicyFunc's invalid policy
	// ([ErrInvalidPolicy]: handled as the limiter's), or a failed report
	// of the usage a handler added ([AddUsage]; [ErrCannotReport] when the
	// Limiter is not a [Reporter]), after the request was served. Log or
	// count them: failing open hides them otherwise.
	OnError func(r *http.Request, err error)
	// Denied writes the answer to a denied request; the rate-limit fields
	// and Retry-After are set already, and [FromContext] gives the
	// decision. It must write the status. Default: 429 with the text "Too
	// Many Requests".
	Denied http.Handler
}

// Middleware limits the requests of an [http.Handler]. It is safe for
// concurrent use.
type Middleware struct {
	cfg Config
}

// New validates cfg and returns the middleware. An error wraps
// [ErrInvalidConfig] or [ErrInvalidPolicy].
func New(cfg Config) (*Middleware, error) {
	if cfg.Limiter == nil {
		return nil, fmt.Errorf("%w: Limiter is nil", ErrInvalidConfig)
	}
	if cfg.PolicyFunc == nil {
		if err := cfg.Policy.Validate(); err != nil {
			return nil, err
		}
	}
	if cfg.Key == nil {
		cfg.Key = ClientIP(TrustedProxies{})
	}
	if cfg.Denied == nil {
		cfg.Denied = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		})
	}
	return &Middleware{cfg: cfg}, nil
}

// Wrap returns next limited: each request is decided under its policy
// before next sees it. Every decided request's answer carries the
// RateLimit-Policy and RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11);
// a denied request is answered by Config.Denied (429 with Retry-After) and
// never reaches next; an allowed one reaches next with its [Result] in its
// context, and what next adds with [AddUsage] is reported on its counter
// once next returns.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := m.policy(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		key, err := m.cfg.Key(r)
		if err == nil && key == "" {
			err = ErrNoKey
		}
		if err != nil {
			m.report(r, err)
			http.Error(w, "Bad Request: the request has no rate-limit key", http.StatusBadRequest)
			return
		}
		res, err := Check(r.Context(), m.cfg.Limiter, p, key, m.cost(r))
		if err != nil {
			m.report(r, err)
			if m.cfg.FailClosed {
				http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		res.SetHeaders(w.Header())
		r = r.WithContext(NewContext(r.Context(), res))
		if !res.Decision.Allowed {
			m.cfg.Denied.ServeHTTP(w, r)
			return
		}
		m.serveCounted(w, r, next, p, key)
	})
}

func (m *Middleware) policy(r *http.Request) (Policy, bool) {
	if m.cfg.PolicyFunc == nil {
		return m.cfg.Policy, true
	}
	return m.cfg.PolicyFunc(r)
}

func (m *Middleware) cost(r *http.Request) int64 {
	if m.cfg.Cost == nil {
		return 1
	}
	return m.cfg.Cost(r)
}

func (m *Middleware) report(r *http.Request, err error) {
	if m.cfg.OnError != nil {
		m.cfg.OnError(r, err)
	}
}

// resultKey is the context key of a request's Result.
type resultKey struct{}

// NewContext returns a copy of ctx carrying res, for [FromContext]: what
// the middleware gives the handlers (and grpclimit its gRPC handlers).
func NewContext(ctx context.Context, res Result) context.Context {
	return context.WithValue(ctx, resultKey{}, res)
}

// FromContext returns the decision on the request whose context is ctx,
// when the middleware made one: in the wrapped handler and in
// Config.Denied.
func FromContext(ctx context.Context) (Result, bool) {
	r, ok := ctx.Value(resultKey{}).(Result)
	return r, ok
}
