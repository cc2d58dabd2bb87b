package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/httplimit/grpclimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs a gRPC health server on loopback behind the interceptors of
// cfg and returns a client of it; both stop when the test ends.
func serve(t *testing.T, cfg grpclimit.Config) healthpb.HealthClient {
	t.Helper()
	in, err := grpclimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(in.Unary()), grpc.StreamInterceptor(in.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return healthpb.NewHealthClient(conn)
}

func embedded(t *testing.T) httplimit.Limiter {
	t.Helper()
	l, err := sluice.New(sluice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return httplimit.Embedded(l)
}

var rateLimitField = regexp.MustCompile(`^"limited";r=(\d+);t=(\d+)$`)

// call makes one unary or stream call and returns its status code and its
// header metadata.
func call(t *testing.T, c healthpb.HealthClient, stream bool, md metadata.MD) (codes.Code, metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 5*time.Second)
	defer cancel()
	var header metadata.MD
	var err error
	if stream {
		var s grpc.ServerStreamingClient[healthpb.HealthCheckResponse]
		s, err = c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = s.Recv()
			header, _ = s.Header()
		}
	} else {
		_, err = c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
	}
	return status.Code(err), header, err
}

func TestLimitsUnaryCallsAndStreams(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "unary", true: "stream"}[stream], func(t *testing.T) {
			c := serve(t, grpclimit.Config{Limiter: embedded(t), Policy: httplimit.Policy{Name: "limited", Limit: 2, Window: time.Minute}})
			steps := []struct {
				want          codes.Code
				wantRemaining int64
			}{{codes.OK, 1}, {codes.OK, 0}, {codes.ResourceExhausted, 0}}
			for i, s := range steps {
				code, md, err := call(t, c, stream, nil)
				if code != s.want {
					t.Fatalf("call %d: %v, want %v", i, err, s.want)
				}
				if got := md.Get("ratelimit-policy"); len(got) != 1 || got[0] != `"limited";q=2;w=60` {
					t.Errorf("call %d: ratelimit-policy %q", i, got)
				}
				m := rateLimitField.FindStringSubmatch(first(md.Get("ratelimit")))
				if m == nil || m[1] != strconv.FormatInt(s.wantRemaining, 10) {
					t.Errorf("call %d: ratelimit %q, want r=%d", i, md.Get("ratelimit"), s.wantRemaining)
				}
				if s.want == codes.OK {
					continue
				}
				retry, err2 := strconv.Atoi(first(md.Get("retry-after")))
				secs, _ := strconv.Atoi(m[2])
				if err2 != nil || retry < secs {
					t.Errorf("retry-after %q, want seconds no fewer than t=%d", md.Get("retry-after"), secs)
				}
				var info *errdetails.RetryInfo
				for _, d := range status.Convert(err).Details() {
					if ri, ok := d.(*errdetails.RetryInfo); ok {
						info = ri
					}
				}
				if info == nil || info.GetRetryDelay().AsDuration() != time.Duration(retry)*time.Second {
					t.Errorf("RetryInfo %v, want %d s", info, retry)
				}
			}
		})
	}
}

func TestKeys(t *testing.T) {
	proxies := httplimit.TrustedProxies{Prefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	tests := []struct {
		name  string
		key   grpclimit.KeyFunc
		calls []metadata.MD
		want  []codes.Code
	}{
		{"peer IP: one key", nil, []metadata.MD{nil, nil}, []codes.Code{codes.OK, codes.ResourceExhausted}},
		{"metadata: a key each", grpclimit.Metadata("X-API-Key"),
			[]metadata.MD{metadata.Pairs("x-api-key", "a"), metadata.Pairs("x-api-key", "b"), metadata.Pairs("x-api-key", "a")},
			[]codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}},
		{"metadata missing", grpclimit.Metadata("x-api-key"), []metadata.MD{nil}, []codes.Code{codes.InvalidArgument}},
		{"behind a trusted proxy: the forwarded client", grpclimit.PeerIP(proxies),
			[]metadata.MD{metadata.Pairs("x-forwarded-for", "198.51.100.1"), metadata.Pairs("x-forwarded-for", "6.6.6.6, 198.51.100.2"), metadata.Pairs("x-forwarded-for", "198.51.100.1")},
			[]codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serve(t, grpclimit.Config{Limiter: embedded(t), Policy: httplimit.Policy{Limit: 1, Window: time.Minute}, Key: tt.key})
			for i, md := range tt.calls {
				if code, _, err := call(t, c, false, md); code != tt.want[i] {
					t.Errorf("call %d: %v, want %v", i, err, tt.want[i])
				}
			}
		})
	}
}

var errLimiter = errors.New("limiter down")

func TestLimiterFailure(t *testing.T) {
	failing := httplimit.LimiterFunc(func(context.Context, httplimit.Request) (httplimit.Decision, error) {
		return httplimit.Decision{}, errLimiter
	})
	for _, failClosed := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail closed %v", failClosed), func(t *testing.T) {
			reported := make(chan error, 1)
			c := serve(t, grpclimit.Config{
				Limiter: failing, Policy: httplimit.Policy{Limit: 1, Window: time.Minute}, FailClosed: failClosed,
				OnError: func(_ context.Context, method string, err error) { reported <- fmt.Errorf("%s: %w", method, err) },
			})
			code, md, _ := call(t, c, false, nil)
			want := map[bool]codes.Code{false: codes.OK, true: codes.Unavailable}[failClosed]
			if code != want || len(md.Get("ratelimit")) != 0 {
				t.Errorf("%v with ratelimit %q, want %v and no metadata", code, md.Get("ratelimit"), want)
			}
			if err := <-reported; !errors.Is(err, errLimiter) {
				t.Errorf("OnError got %v", err)
			}
		})
	}
}

func TestPolicyFunc(t *testing.T) {
	c := serve(t, grpclimit.Config{
		Limiter: embedded(t),
		PolicyFunc: func(_ context.Context, method string) (httplimit.Policy, bool) {
			return httplimit.Policy{Name: "watch", Limit: 1, Window: time.Minute}, method == "/grpc.health.v1.Health/Watch"
		},
	})
	for i, tc := range []struct {
		stream bool
		want   codes.Code
	}{{false, codes.OK}, {false, codes.OK}, {true, codes.OK}, {true, codes.ResourceExhausted}} {
		if code, _, err := call(t, c, tc.stream, nil); code != tc.want {
			t.Errorf("call %d (stream %v): %v, want %v", i, tc.stream, err, tc.want)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	tests := []struct {
		name string
		cfg  grpclimit.Config
		want error
	}{
		{"no limiter", grpclimit.Config{Policy: httplimit.Policy{Limit: 1, Window: time.Second}}, grpclimit.ErrInvalidConfig},
		{"no window", grpclimit.Config{Limiter: embedded(t), Policy: httplimit.Policy{Limit: 1}}, httplimit.ErrInvalidPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := grpclimit.New(tt.cfg); !errors.Is(err, tt.want) {
				t.Errorf("New = %v, want %v", err, tt.want)
			}
		})
	}
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}
