package rls

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
)

// GRPCServer returns s as a native grpc-go RateLimitServiceServer, for a
// grpc.Server built with [Service.GRPCServerOptions] (or use
// [Service.NewGRPCServer]). Its answers and errors are those of
// [Service.ShouldRateLimit]: a *connect.Error becomes a gRPC status of the
// same code and message, and a panic becomes Internal "internal error"
// (logged), as with [Service.Handler]. Its answers are never compressed,
// whatever compressors the process registers and whatever the client sends
// or accepts: an RLS answer is a few dozen bytes.
func (s *Service) GRPCServer() rlsv3.RateLimitServiceServer { return grpcService{s: s} }

// GRPCServerOptions returns the options a grpc.Server serving
// [Service.GRPCServer] needs: requests over Config.MaxMessageBytes are
// refused with ResourceExhausted before they are decoded.
func (s *Service) GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(s.cfg.MaxMessageBytes)}
}

// NewGRPCServer returns a grpc.Server with opts and then
// [Service.GRPCServerOptions] (so the request cap holds whatever opts say),
// serving [Service.GRPCServer]. Serve it on a listener of its own.
func (s *Service) NewGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	srv := grpc.NewServer(append(opts, s.GRPCServerOptions()...)...)
	rlsv3.RegisterRateLimitServiceServer(srv, s.GRPCServer())
	return srv
}

// grpcService adapts a Service to grpc-go.
type grpcService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Service
}

// errInternal is the message of a call that panicked.
var errInternal = status.Error(codes.Internal, "internal error")

// ShouldRateLimit decides one request with Service.ShouldRateLimit.
func (g grpcService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (res *rlsv3.RateLimitResponse, err error) {
	defer func() {
		if p := recover(); p != nil {
			g.s.cfg.Logger.Error("rls: panic in ShouldRateLimit", "panic", p)
			res, err = nil, errInternal
		}
	}()
	uncompressed(ctx)
	res, err = g.s.ShouldRateLimit(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	return res, nil
}

// sendCompressor is what grpc-go's server stream (the one the handler's
// context carries) tells of the compressor of its answer.
type sendCompressor interface{ SendCompress() string }

// uncompressed makes the answer of the call of ctx uncompressed. grpc-go
// answers a compressed request with the request's compressor when the
// process registers it (grpc/encoding/gzip is linked in by dependencies),
// and sets that compressor before the handler runs; it is replaced here by
// identity. Uncompressed requests, the usual case, cost one type check.
func uncompressed(ctx context.Context) {
	if st, ok := grpc.ServerTransportStreamFromContext(ctx).(sendCompressor); ok && st.SendCompress() == "" {
		return
	}
	// identity is always accepted; the only error is a context without a
	// stream (a direct call), which has nothing to compress.
	_ = grpc.SetSendCompressor(ctx, encoding.Identity)
}

// grpcError is err, an error of Service.ShouldRateLimit, as a gRPC status:
// a *connect.Error keeps its code (connect's codes are gRPC's) and its
// message; anything else is Unknown with its text, as connect-go sends it.
func grpcError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return status.Error(codes.Code(ce.Code()), ce.Message())
	}
	return status.Error(codes.Unknown, err.Error())
}
