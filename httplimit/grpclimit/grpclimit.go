// Package grpclimit rate-limits a gRPC server with Sluice: unary and stream
// server interceptors that decide each call under a policy with an
// [httplimit.Limiter] (an embedded *sluice.Limiter or a *client.Client),
// exactly as httplimit decides an HTTP request.
//
// Every decided call's answer carries the rate-limit fields of
// draft-ietf-httpapi-ratelimit-headers-11 as header metadata,
// "ratelimit-policy" and "ratelimit" (the values of [httplimit.Result]'s
// PolicyField and RateLimitField). A denied call ends with
// codes.ResourceExhausted, the metadata "retry-after" (seconds) and a
// google.rpc.RetryInfo detail saying the same; it never reaches the
// handler. A stream is decided once, when it opens.
//
// When the limiter fails, calls are served (fail open) unless
// Config.FailClosed ends them with codes.Unavailable; Config.OnError sees
// the error either way. A call without a key ends with
// codes.InvalidArgument.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/httplimit"
)

// ErrInvalidConfig is returned, wrapped with the reason, by [New].
var ErrInvalidConfig = errors.New("grpclimit: invalid config")

// KeyFunc returns the key of a call to fullMethod (e.g.
// "/pkg.Service/Method"): who is limited. An error, or an empty key, ends
// the call with codes.InvalidArgument.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// Config configures [Interceptors].
type Config struct {
	// Limiter decides. Required: httplimit.Embedded or httplimit.Remote.
	Limiter httplimit.Limiter
	// Policy applies to every call, unless PolicyFunc is set.
	Policy httplimit.Policy
	// PolicyFunc, if set, chooses each call's policy instead of Policy;
	// false leaves the call unlimited.
	PolicyFunc func(ctx context.Context, fullMethod string) (httplimit.Policy, bool)
	// Key returns a call's key. Default: PeerIP(httplimit.TrustedProxies{}),
	// the peer's address.
	Key KeyFunc
	// Cost returns what a call spends, 0 or more. Default: 1.
	Cost func(ctx context.Context, fullMethod string) int64
	// FailClosed ends calls with codes.Unavailable when the limiter fails;
	// by default they are served.
	FailClosed bool
	// OnError, if set, is called with every error: the limiter's, a key's
	// (wrapping httplimit.ErrNoKey), an invalid policy's, or a failure to
	// send the metadata.
	OnError func(ctx context.Context, fullMethod string, err error)
}

// Interceptors limit the calls of a gRPC server. They are safe for
// concurrent use.
type Interceptors struct {
	cfg Config
}

// New validates cfg and returns the interceptors. An error wraps
// [ErrInvalidConfig] or httplimit.ErrInvalidPolicy.
func New(cfg Config) (*Interceptors, error) {
	if cfg.Limiter == nil {
		return nil, fmt.Errorf("%w: Limiter is nil", ErrInvalidConfig)
	}
	if cfg.PolicyFunc == nil {
		if err := cfg.Policy.Validate(); err != nil {
			return nil, err
		}
	}
	if cfg.Key == nil {
		cfg.Key = PeerIP(httplimit.TrustedProxies{})
	}
	return &Interceptors{cfg: cfg}, nil
}

// Unary returns the interceptor of unary calls (grpc.UnaryInterceptor).
func (i *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, md, err := i.admit(ctx, info.FullMethod)
		if md != nil {
			if e := grpc.SetHeader(ctx, md); e != nil {
				i.report(ctx, info.FullMethod, fmt.Errorf("grpclimit: sending the rate-limit metadata: %w", e))
			}
		}
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream returns the interceptor of streams (grpc.StreamInterceptor): a
// stream is decided once, when it opens.
func (i *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, md, err := i.admit(ss.Context(), info.FullMethod)
		if md != nil {
			if e := ss.SetHeader(md); e != nil {
				i.report(ctx, info.FullMethod, fmt.Errorf("grpclimit: sending the rate-limit metadata: %w", e))
			}
		}
		if err != nil {
			return err
		}
		return handler(srv, contextStream{ServerStream: ss, ctx: ctx})
	}
}

// contextStream is a stream whose context carries the decision.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context with the decision.
func (s contextStream) Context() context.Context { return s.ctx }

// admit decides a call. It returns the call's context (with the decision,
// for httplimit.FromContext), the metadata to send with the answer (nil
// for none) and the status to end the call with (nil to serve it).
func (i *Interceptors) admit(ctx context.Context, method string) (context.Context, metadata.MD, error) {
	p, ok := i.policy(ctx, method)
	if !ok {
		return ctx, nil, nil
	}
	key, err := i.cfg.Key(ctx, method)
	if err == nil && key == "" {
		err = httplimit.ErrNoKey
	}
	if err != nil {
		i.report(ctx, method, err)
		return ctx, nil, status.Error(codes.InvalidArgument, "grpclimit: the call has no rate-limit key")
	}
	res, err := httplimit.Check(ctx, i.cfg.Limiter, p, key, i.cost(ctx, method))
	if err != nil {
		i.report(ctx, method, err)
		if i.cfg.FailClosed {
			return ctx, nil, status.Error(codes.Unavailable, "grpclimit: the rate limiter is unavailable")
		}
		return ctx, nil, nil
	}
	md := metadata.Pairs("ratelimit-policy", res.PolicyField(), "ratelimit", res.RateLimitField())
	ctx = httplimit.NewContext(ctx, res)
	if res.Decision.Allowed {
		return ctx, md, nil
	}
	retry := res.RetryAfter()
	md.Set("retry-after", strconv.FormatInt(int64(retry/time.Second), 10))
	st := status.New(codes.ResourceExhausted, "grpclimit: rate limited by policy "+strconv.Quote(res.Policy.Name))
	if detailed, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
		st = detailed
	}
	return ctx, md, st.Err()
}

func (i *Interceptors) policy(ctx context.Context, method string) (httplimit.Policy, bool) {
	if i.cfg.PolicyFunc == nil {
		return i.cfg.Policy, true
	}
	return i.cfg.PolicyFunc(ctx, method)
}

func (i *Interceptors) cost(ctx context.Context, method string) int64 {
	if i.cfg.Cost == nil {
		return 1
	}
	return i.cfg.Cost(ctx, method)
}

func (i *Interceptors) report(ctx context.Context, method string, err error) {
	if i.cfg.OnError != nil {
		i.cfg.OnError(ctx, method, err)
	}
}

// PeerIP keys calls by the client's IP address: the peer's, unless it is
// one of tp's proxies, in which case the hops of tp.Header, from the
// incoming metadata ("x-forwarded-for" or "forwarded"), are read as
// httplimit.TrustedProxies.Resolve does. Like httplimit.ClientIP, an IPv6
// address is keyed by its /64. A peer without an IP address (a Unix
// socket, an in-memory connection) has no key.
func PeerIP(tp httplimit.TrustedProxies) KeyFunc {
	name := "x-forwarded-for"
	if tp.Header == httplimit.Forwarded {
		name = "forwarded"
	}
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: the call has no peer", httplimit.ErrNoKey)
		}
		host := p.Addr.String()
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		a, err := netip.ParseAddr(host)
		if err != nil {
			return "", fmt.Errorf("%w: the peer address %q is not an IP address", httplimit.ErrNoKey, p.Addr)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		a = tp.Resolve(a, md.Get(name))
		if a.Is4() {
			return a.String(), nil
		}
		prefix, _ := a.Prefix(64) // cannot fail: a is IPv6
		return prefix.String(), nil
	}
}

// Metadata keys calls by the first value of the incoming metadata name
// (e.g. "x-api-key"); a call without it has no key.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if vs := md.Get(name); len(vs) > 0 && vs[0] != "" {
			return vs[0], nil
		}
		return "", fmt.Errorf("%w: no %s metadata", httplimit.ErrNoKey, name)
	}
}
