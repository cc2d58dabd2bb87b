package main

import (
	"context"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// rlsCaller calls ShouldRateLimit over ccs (worker w on ccs[w % len]),
// one request per descriptor value, in turn.
func rlsCaller(ccs []*grpc.ClientConn, domain, key string, descriptors, ids int) caller {
	clients := make([]rlsv3.RateLimitServiceClient, len(ccs))
	for i, cc := range ccs {
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	reqs := make([]*rlsv3.RateLimitRequest, ids)
	for i := range reqs {
		r := &rlsv3.RateLimitRequest{Domain: domain}
		for d := range descriptors {
			r.Descriptors = append(r.Descriptors, &ratelimitv3.RateLimitDescriptor{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: keyOf(key, d), Value: value(i)}},
			})
		}
		reqs[i] = r
	}
	return func(w, i int) (bool, error) {
		res, err := clients[w%len(clients)].ShouldRateLimit(context.Background(), reqs[i%len(reqs)])
		return res.GetOverallCode() == rlsv3.RateLimitResponse_OK, err
	}
}
