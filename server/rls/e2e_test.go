package rls

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// newGRPCClient serves svc over h2c (HTTP/1.1 and unencrypted HTTP/2 on one
// port, as the API port does) with the connect handler and returns a real
// grpc-go client for it.
func newGRPCClient(t *testing.T, svc *Service) rlsv3.RateLimitServiceClient {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return dialRLS(t, strings.TrimPrefix(srv.URL, "http://"))
}

// newNativeClient serves svc with its native grpc-go server on a loopback
// listener and returns a real grpc-go client for it, with opts.
func newNativeClient(t *testing.T, svc *Service, opts ...grpc.DialOption) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := svc.NewGRPCServer()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return dialRLS(t, ln.Addr().String(), opts...)
}

// dialRLS returns a grpc-go client of addr over h2c, closed at the end of
// the test.
func dialRLS(t *testing.T, addr string, opts ...grpc.DialOption) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// transports are the two servers of the service: the connect handler (the
// API port) and the native grpc-go server (--rls-addr).
var transports = []struct {
	name   string
	client func(*testing.T, *Service) rlsv3.RateLimitServiceClient
}{
	{"connect", newGRPCClient},
	{"grpc-go", func(t *testing.T, svc *Service) rlsv3.RateLimitServiceClient { return newNativeClient(t, svc) }},
}

// TestGRPC runs the service's behaviours over both of its servers with a
// real grpc-go client.
func TestGRPC(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testGRPC(t, tr.client) })
	}
}

func testGRPC(t *testing.T, newClient func(*testing.T, *Service) rlsv3.RateLimitServiceClient) {
	h := newHarness(t, mustParse(t, testRules))
	client := newClient(t, h.svc)
	call := func(r *rlsv3.RateLimitRequest) (string, error) {
		t.Helper()
		res, err := client.ShouldRateLimit(t.Context(), r)
		if err != nil {
			return "", err
		}
		return summary(res), nil
	}

	t.Run("OK until the limit, then OVER_LIMIT", func(t *testing.T) {
		for i, want := range []string{
			"OK [OK 3/HOUR rem=2]", "OK [OK 3/HOUR rem=1]", "OK [OK 3/HOUR rem=0]", "OVER_LIMIT [OVER_LIMIT 3/HOUR rem=0]",
		} {
			got, err := call(req("d", 0, desc("user=grpc")))
			if err != nil || got != want {
				t.Fatalf("call %d = %s, %v; want %s", i, got, err, want)
			}
		}
	})

	t.Run("statuses", func(t *testing.T) {
		res, err := client.ShouldRateLimit(t.Context(), req("d", 0, desc("window=s"), desc("free=s"), desc("none=s")))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := summary(res), "OK [OK 5/SECONDx90 (ninety) rem=4; OK rem=4294967295; OK rem=0]"; got != want {
			t.Errorf("got %s, want %s", got, want)
		}
		st := res.GetStatuses()
		if got := st[0].GetDurationUntilReset().AsDuration().String(); got != "24.994s" {
			t.Errorf("duration_until_reset = %s, want 24.994s", got)
		}
		if st[1].GetDurationUntilReset() != nil || st[2].GetCurrentLimit() != nil {
			t.Errorf("unlimited or unmatched status has a limit or a reset: %v", st)
		}
	})

	t.Run("all-or-nothing across two descriptors", func(t *testing.T) {
		for i, tc := range []struct {
			req  *rlsv3.RateLimitRequest
			want string
		}{
			{req("d", 0, desc("user=aon"), desc("ip=aon")), "OK [OK 3/HOUR rem=2; OK 1/HOUR rem=0]"},
			{req("d", 0, desc("user=aon"), desc("ip=aon")), "OVER_LIMIT [OK 3/HOUR rem=2; OVER_LIMIT 1/HOUR rem=0]"},
			{req("d", 0, desc("user=aon")), "OK [OK 3/HOUR rem=1]"},
		} {
			if got, err := call(tc.req); err != nil || got != tc.want {
				t.Fatalf("call %d = %s, %v; want %s", i, got, err, tc.want)
			}
		}
	})

	t.Run("InvalidArgument", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			req  *rlsv3.RateLimitRequest
			want string
		}{
			{"empty domain", req("", 0, desc("user=a")), "domain is empty"},
			{"no descriptors", req("d", 0), "descriptors are empty"},
			{"empty value", req("d", 0, desc("user=")), "value is empty"},
		} {
			_, err := call(tc.req)
			if s := status.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), tc.want) {
				t.Errorf("%s: err = %v, want InvalidArgument with %q", tc.name, err, tc.want)
			}
		}
	})

	t.Run("Unavailable when the limiter is closed", func(t *testing.T) {
		h.real.Close()
		if _, err := call(req("d", 0, desc("user=late"))); status.Code(err) != codes.Unavailable {
			t.Errorf("err = %v, want Unavailable", err)
		}
	})
}

// TestGRPCDefaults runs a service with its default clock and no observer
// over the network, on both servers, checking only what no timing can
// change.
func TestGRPCDefaults(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testGRPCDefaults(t, tr.client) })
	}
}

func testGRPCDefaults(t *testing.T, newClient func(*testing.T, *Service) rlsv3.RateLimitServiceClient) {
	l := newHarness(t, mustParse(t, testRules)).real
	svc, err := New(Config{Limiter: l, Domains: mustParse(t, testRules)})
	if err != nil {
		t.Fatal(err)
	}
	client := newClient(t, svc)
	res, err := client.ShouldRateLimit(t.Context(), req("d", 0, desc("user=now")))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := summary(res), "OK [OK 3/HOUR rem=2]"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if d := res.GetStatuses()[0].GetDurationUntilReset().AsDuration(); d <= 0 || d > time.Hour {
		t.Errorf("duration_until_reset = %v, want within (0, 1h]", d)
	}
}
