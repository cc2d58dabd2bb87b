package rls

import (
	"context"
	"fmt"
	"net"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sluicehq/sluice"
)

// benchRules limit three descriptors far above what a benchmark spends, so
// every call is answered OK.
const benchRules = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// benchRequest is a call with n (1 to 3) limited descriptors.
func benchRequest(n int) *rlsv3.RateLimitRequest {
	ds := []*ratelimitv3.RateLimitDescriptor{desc("remote_address=10.0.0.1"), desc("path=/api"), desc("user=alice")}
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds[:n]}
}

// benchService is a service of benchRules over an in-memory limiter on the
// real clock.
func benchService(b *testing.B) *Service {
	b.Helper()
	l, err := sluice.New(sluice.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	svc, err := New(Config{Limiter: l, Domains: mustParse(b, benchRules)})
	if err != nil {
		b.Fatal(err)
	}
	return svc
}

// BenchmarkNativeGRPC measures one ShouldRateLimit call over the native
// grpc-go server, client and server in this process over an in-memory
// connection (bufconn): its allocations are the client's, grpc-go's on both
// sides, protobuf's and the service's.
func BenchmarkNativeGRPC(b *testing.B) {
	svc := benchService(b)
	ln := bufconn.Listen(1 << 20)
	srv := svc.NewGRPCServer()
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("descriptors=%d", n), func(b *testing.B) {
			r := benchRequest(n)
			b.ReportAllocs()
			for b.Loop() {
				res, err := client.ShouldRateLimit(context.Background(), r)
				if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Fatalf("ShouldRateLimit = %v, %v", res, err)
				}
			}
		})
	}
}

// BenchmarkShouldRateLimit measures the service's own work on one call,
// without a transport: Service.ShouldRateLimit on a decoded request.
func BenchmarkShouldRateLimit(b *testing.B) {
	svc := benchService(b)
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("descriptors=%d", n), func(b *testing.B) {
			r := benchRequest(n)
			b.ReportAllocs()
			for b.Loop() {
				res, err := svc.ShouldRateLimit(context.Background(), r)
				if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Fatalf("ShouldRateLimit = %v, %v", res, err)
				}
			}
		})
	}
}
