package rls

import (
	"encoding/binary"
	"os"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// TestH2LoadFixture keeps the recorded load-test message and rules of
// tools/h2load valid: the message is one gRPC frame holding a request the
// rules answer OK.
func TestH2LoadFixture(t *testing.T) {
	frame, err := os.ReadFile("../../tools/h2load/shouldratelimit.grpc")
	if err != nil {
		t.Fatal(err)
	}
	if len(frame) < 5 || frame[0] != 0 || int(binary.BigEndian.Uint32(frame[1:5])) != len(frame)-5 {
		t.Fatalf("not one uncompressed gRPC frame: % x", frame)
	}
	var req rlsv3.RateLimitRequest
	if err := proto.Unmarshal(frame[5:], &req); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, mustLoad(t, "../../tools/h2load/rls.yaml"))
	res, err := h.svc.ShouldRateLimit(t.Context(), &req)
	if err != nil {
		t.Fatal(err)
	}
	if res.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(res.GetStatuses()) != 1 ||
		res.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 1_000_000_000 {
		t.Fatalf("response %v: want OK under the 10^9 per second rule", res)
	}
}
