package rls

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
)

// brokenLimiter fails every decision with err, or panics.
type brokenLimiter struct {
	err    error
	panics bool
}

func (l brokenLimiter) Ratelimit(context.Context, sluice.Request) (sluice.Response, error) {
	if l.panics {
		panic("limiter bug")
	}
	return sluice.Response{}, l.err
}

func (l brokenLimiter) RatelimitMany(context.Context, []sluice.Request) ([]sluice.Response, error) {
	if l.panics {
		panic("limiter bug")
	}
	return nil, l.err
}

func (l brokenLimiter) ReportMany(ctx context.Context, rs []sluice.Request) ([]sluice.Response, error) {
	return l.RatelimitMany(ctx, rs)
}

// TestNativeGRPCErrors checks that the native grpc-go server answers each
// failure with the code and message of the connect handler.
func TestNativeGRPCErrors(t *testing.T) {
	rules := mustParse(t, testRules)
	for _, tc := range []struct {
		name     string
		limiter  Limiter
		maxBytes int
		req      *rlsv3.RateLimitRequest
		code     codes.Code
		msg      string // the whole message; "" when the servers word it differently
	}{
		{"an invalid request", brokenLimiter{}, 0, req("", 0, desc("user=a")), codes.InvalidArgument, "rls: invalid request: domain is empty"},
		{"a limit the limiter refuses", brokenLimiter{err: sluice.ErrInvalidRequest}, 0, req("d", 0, desc("user=a")), codes.InvalidArgument, sluice.ErrInvalidRequest.Error()},
		{"a failing limiter", brokenLimiter{err: errors.New("origin 10.0.0.9 down")}, 0, req("d", 0, desc("user=a")), codes.Unavailable, errUnavailable.Error()},
		{"a panicking limiter", brokenLimiter{panics: true}, 0, req("d", 0, desc("user=a")), codes.Internal, "internal error"},
		{"a message over the cap", brokenLimiter{}, 64, req("d", 0, descs(8)...), codes.ResourceExhausted, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, err := New(Config{Limiter: tc.limiter, Domains: rules, MaxMessageBytes: tc.maxBytes})
			if err != nil {
				t.Fatal(err)
			}
			var msgs []string
			for _, tr := range transports {
				_, err := tr.client(t, svc).ShouldRateLimit(t.Context(), tc.req)
				st := status.Convert(err)
				if st.Code() != tc.code || (tc.msg != "" && st.Message() != tc.msg) {
					t.Errorf("%s: %v, want %v %q", tr.name, err, tc.code, tc.msg)
				}
				msgs = append(msgs, st.Message())
			}
			if tc.msg != "" && msgs[0] != msgs[1] {
				t.Errorf("messages differ: connect %q, grpc-go %q", msgs[0], msgs[1])
			}
		})
	}
}

// TestGRPCError checks the conversion of ShouldRateLimit's errors.
func TestGRPCError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"a connect error", connect.NewError(connect.CodeInvalidArgument, errors.New("bad")), codes.InvalidArgument, "bad"},
		{"a wrapped connect error", errors.Join(connect.NewError(connect.CodeUnavailable, errors.New("later"))), codes.Unavailable, "later"},
		{"a plain error", errors.New("odd"), codes.Unknown, "odd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := status.Convert(grpcError(tc.err))
			if st.Code() != tc.code || st.Message() != tc.msg {
				t.Errorf("grpcError = %v %q, want %v %q", st.Code(), st.Message(), tc.code, tc.msg)
			}
		})
	}
}

// compressionStats records, on the client, the encoding of requests sent and
// of answers received.
type compressionStats struct {
	mu       sync.Mutex
	sent     []string
	received []string
}

func (s *compressionStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}

func (s *compressionStats) HandleRPC(_ context.Context, st stats.RPCStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st := st.(type) {
	case *stats.OutHeader:
		s.sent = append(s.sent, st.Compression)
	case *stats.InHeader:
		s.received = append(s.received, st.Compression)
	}
}

func (s *compressionStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (s *compressionStats) HandleConn(context.Context, stats.ConnStats) {}

// TestNativeGRPCNeverCompresses calls the native server from a client that
// has gzip (this test imports it, so the whole process registers it, the
// server too): whether the client only offers gzip or also compresses its
// request with it, the call succeeds and the answer is not compressed.
func TestNativeGRPCNeverCompresses(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []grpc.CallOption
		sent string // the request's encoding
	}{
		{"offers gzip", nil, ""},
		{"sends gzip", []grpc.CallOption{grpc.UseCompressor(gzip.Name)}, gzip.Name},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, mustParse(t, testRules))
			cs := &compressionStats{}
			client := newNativeClient(t, h.svc, grpc.WithStatsHandler(cs))
			res, err := client.ShouldRateLimit(t.Context(), req("d", 0, desc("user="+strings.Repeat("z", 200))), tc.opts...)
			if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("ShouldRateLimit = %v, %v; want OK", res, err)
			}
			cs.mu.Lock()
			defer cs.mu.Unlock()
			if len(cs.sent) != 1 || cs.sent[0] != tc.sent {
				t.Errorf("request encodings %q, want [%q]", cs.sent, tc.sent)
			}
			if len(cs.received) != 1 || (cs.received[0] != "" && cs.received[0] != "identity") {
				t.Errorf("answer encodings %q, want one uncompressed", cs.received)
			}
		})
	}
}
