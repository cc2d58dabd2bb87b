// Command rlsceiling is the throughput ceiling of an Envoy RLS server: a
// trivial grpc-go server whose ShouldRateLimit answers OK to every call,
// with one status per descriptor, and does nothing else. tools/rlsload runs
// against it and against `sluice serve --rls-addr` in turn; Sluice's
// figures are judged against this one's.
//
//	go run ./tools/rlsceiling -addr 127.0.0.1:8082
package main

import (
	"context"
	"flag"
	"log"
	"net"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// ok answers OK to every call.
type ok struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// ShouldRateLimit answers OK with one OK status per descriptor.
func (ok) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	res := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range r.GetDescriptors() {
		res.Statuses = append(res.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return res, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8082", "listen address (h2c)")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, ok{})
	log.Printf("rlsceiling: listening on %s", ln.Addr())
	log.Fatal(srv.Serve(ln))
}
