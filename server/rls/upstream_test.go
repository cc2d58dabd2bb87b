package rls

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
)

// TestUpstreamBasicConfig makes the calls of envoyproxy/ratelimit's
// integration test testBasicBaseConfig (test/integration/integration_test.go
// at f2fb15770f7fd1c88ca6c3a1b58ee513917ace96) with its rule files
// (testdata/upstream: basic.yaml and another.yaml, unchanged) and checks
// every answer against upstream's expectation, whole (proto.Equal), over
// the native gRPC server and over the connect handler. What differs:
//
//   - Upstream's test runs its own server in-process and also checks its
//     statistics (hit, over-limit and local-cache counters); those checks
//     have no counterpart here and are left out.
//   - In the call of two descriptors one of which is over its limit, the
//     other's remaining count is upstream's expectation with
//     StopCacheKeyIncrementWhenOverlimit set: Sluice decides a call's
//     descriptors all-or-nothing, so a denied call spends nothing on the
//     others (docs/reference/rls-config.md).
//   - The clock is fixed on a whole second and moved 2 s where upstream
//     sleeps 2 s: upstream's durations until reset are whole seconds, and
//     its expectations copy only their seconds.
func TestUpstreamBasicConfig(t *testing.T) {
	for _, transport := range []struct {
		name   string
		client func(*testing.T, *Service) rlsv3.RateLimitServiceClient
	}{
		{"native gRPC", func(t *testing.T, s *Service) rlsv3.RateLimitServiceClient { return newNativeClient(t, s) }},
		{"connect handler", newGRPCClient},
	} {
		t.Run(transport.name, func(t *testing.T) {
			var now atomic.Int64
			now.Store(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli())
			clock := func() time.Time { return time.UnixMilli(now.Load()) }
			l, err := sluice.New(sluice.Config{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			svc, err := New(Config{Limiter: l, Domains: mustLoad(t, "testdata/upstream"), Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			u := upstream{t: t, c: transport.client(t, svc)}
			u.basicBaseConfig(func() { now.Add(2000) })
		})
	}
}

// upstream makes the calls of upstream's test and checks their answers.
type upstream struct {
	t *testing.T
	c rlsv3.RateLimitServiceClient
}

// call is upstream's common.NewRateLimitRequest sent to the service.
func (u upstream) call(domain string, descriptors [][][2]string, hits uint32) *rlsv3.RateLimitResponse {
	u.t.Helper()
	r := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range descriptors {
		nd := &ratelimitv3.RateLimitDescriptor{}
		for _, e := range d {
			nd.Entries = append(nd.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
		}
		r.Descriptors = append(r.Descriptors, nd)
	}
	res, err := u.c.ShouldRateLimit(context.Background(), r)
	if err != nil {
		u.t.Fatalf("ShouldRateLimit(%v): %v", r, err)
	}
	return res
}

// expect fails the test unless res is want (upstream's AssertProtoEqual).
func (u upstream) expect(step string, want, res *rlsv3.RateLimitResponse) {
	u.t.Helper()
	if !proto.Equal(want, res) {
		u.t.Errorf("%s:\n got %v\nwant %v", step, res, want)
	}
}

// upstreamStatus is upstream's newDescriptorStatus: the duration until reset
// carries the seconds of dur only.
func upstreamStatus(code rlsv3.RateLimitResponse_Code, perUnit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32, dur *durationpb.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: perUnit, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: &durationpb.Duration{Seconds: dur.GetSeconds()},
	}
}

// basicBaseConfig is upstream's testBasicBaseConfig without local cache
// (its keys, not their _local copies), its checks of statistics left out;
// wait2s stands for its 2 s sleep.
func (u upstream) basicBaseConfig(wait2s func()) {
	const (
		ok   = rlsv3.RateLimitResponse_OK
		over = rlsv3.RateLimitResponse_OVER_LIMIT
	)
	res := u.call("foo", [][][2]string{{{"hello", "world"}}}, 1)
	u.expect("unknown domain", &rlsv3.RateLimitResponse{OverallCode: ok,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: ok}}}, res)

	res = u.call("basic", [][][2]string{{{"key1", "foo"}}}, 1)
	u.expect("basic key1", &rlsv3.RateLimitResponse{OverallCode: ok, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
		upstreamStatus(ok, 50, rlsv3.RateLimitResponse_RateLimit_SECOND, 49, res.GetStatuses()[0].GetDurationUntilReset())}}, res)

	// Over the limit of a minute.
	for i := range 25 {
		code, remaining := ok, uint32(20-(i+1))
		if i >= 20 {
			code, remaining = over, 0
		}
		res = u.call("another", [][][2]string{{{"key2", "7"}}}, 1)
		u.expect("key2 call "+strconv.Itoa(i), &rlsv3.RateLimitResponse{OverallCode: code, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			upstreamStatus(code, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, remaining, res.GetStatuses()[0].GetDurationUntilReset())}}, res)
	}

	// Two keys of one domain.
	for i := range 15 {
		code, remaining1, remaining2 := ok, uint32(20-(i+1)), uint32(10-(i+1))
		if i >= 10 {
			code, remaining1, remaining2 = over, 10, 0 // remaining1: with StopCacheKeyIncrementWhenOverlimit
		}
		res = u.call("another", [][][2]string{{{"key2", "8"}}, {{"key3", "8"}}}, 1)
		st := res.GetStatuses()
		if len(st) != 2 {
			u.t.Fatalf("key2 and key3 call %d: %v, want 2 statuses", i, res)
		}
		u.expect("key2 and key3 call "+strconv.Itoa(i), &rlsv3.RateLimitResponse{OverallCode: code, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			upstreamStatus(ok, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, remaining1, st[0].GetDurationUntilReset()),
			upstreamStatus(code, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, remaining2, st[1].GetDurationUntilReset()),
		}}, res)
	}

	// The duration until reset counts down.
	res1 := u.call("another", [][][2]string{{{"key4", "durTest"}}}, 1)
	wait2s()
	res2 := u.call("another", [][][2]string{{{"key4", "durTest"}}}, 1)
	if d1, d2 := res1.GetStatuses()[0].GetDurationUntilReset().GetSeconds(), res2.GetStatuses()[0].GetDurationUntilReset().GetSeconds(); d2 >= d1 {
		u.t.Errorf("duration until reset %d s, then %d s 2 s later; want it lower", d1, d2)
	}
}
