package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// okRLS answers every ShouldRateLimit call OK.
type okRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (okRLS) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// serveRLSListener serves okRLS through serveRLS on a loopback --rls-addr
// capped at maxConns connections, each closed if it starts no call within
// firstRequest, and returns its address and metrics. The listener is
// drained at the end of the test.
func serveRLSListener(t *testing.T, maxConns int, firstRequest time.Duration) (string, *prometheus.Registry) {
	t.Helper()
	c := &serveCmd{
		ShutdownTimeout: time.Second,
		RLSFlags:        RLSFlags{RLSAddr: "127.0.0.1:0", RLSMaxConns: maxConns},
		firstRequest:    firstRequest,
	}
	reg := prometheus.NewRegistry()
	var logs lockedBuffer // the server's goroutines write to it
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var cl cleanup
	t.Cleanup(cl.run)
	if err := c.serveRLS(okRLS{}, nil, log, reg, &hangup{}, &cl); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`msg="envoy rls listening" addr=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no listening address in the log:\n%s", logs.String())
	}
	return m[1], reg
}

// rlsClientOver returns a grpc-go client (h2c) that uses conn, and no other
// connection: once conn fails, its calls fail.
func rlsClientOver(t *testing.T, conn net.Conn) rlsv3.RateLimitServiceClient {
	t.Helper()
	var dialed atomic.Bool
	cc, err := grpc.NewClient("passthrough:///rls",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
			if dialed.Swap(true) {
				return nil, errors.New("one connection only")
			}
			return conn, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

// rlsCallOK reports whether one ShouldRateLimit call with c succeeds within
// 5 s.
func rlsCallOK(c rlsv3.RateLimitServiceClient) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d"})
	return err == nil && res.GetOverallCode() == rlsv3.RateLimitResponse_OK
}

// TestRLSListenerMaxConns opens N+3 gRPC connections to an --rls-addr
// capped at N by --rls-max-conns: the first N are served, the 3 others are
// closed at accept and counted under the RLS listener's own metrics.
func TestRLSListenerMaxConns(t *testing.T) {
	const n, extra = 3, 3
	addr, reg := serveRLSListener(t, n, time.Minute)
	served, refused := 0, 0
	for range n + extra {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil { // the reset of a refused connection can come before connect returns
			refused++
			continue
		}
		defer conn.Close()
		if rlsCallOK(rlsClientOver(t, conn)) {
			served++
		} else {
			refused++
		}
	}
	if served != n || refused != extra {
		t.Fatalf("%d connections served and %d refused, want %d and %d", served, refused, n, extra)
	}
	for name, want := range map[string]float64{
		"sluice_rls_connections_rejected_total": extra,
		"sluice_rls_connections_open":           n,
	} {
		if got := metricValue(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// TestRLSListenerFirstRequestTimeout checks that a connection to
// --rls-addr that starts no call within the first-request timeout is
// closed, HTTP/2 preface-only as well as silent, and that one that made a
// call is kept past it.
func TestRLSListenerFirstRequestTimeout(t *testing.T) {
	const first = 300 * time.Millisecond
	addr, reg := serveRLSListener(t, 100, first)
	sendPreface := func(t *testing.T, conn net.Conn) (bool, rlsv3.RateLimitServiceClient) {
		_, err := io.WriteString(conn, h2cPreface)
		return err == nil, nil
	}
	for _, tc := range []struct {
		name string
		// open is what the client does first (false: it failed), with the
		// gRPC client that owns conn if it made one.
		open   func(t *testing.T, conn net.Conn) (bool, rlsv3.RateLimitServiceClient)
		closed bool
	}{
		{"h2c preface only", sendPreface, true},
		{"nothing", func(*testing.T, net.Conn) (bool, rlsv3.RateLimitServiceClient) { return true, nil }, true},
		{"a call first", func(t *testing.T, conn net.Conn) (bool, rlsv3.RateLimitServiceClient) {
			c := rlsClientOver(t, conn)
			return rlsCallOK(c), c
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			ok, client := tc.open(t, conn)
			if !ok {
				t.Fatal("the client's first step failed")
			}
			if !tc.closed {
				time.Sleep(3 * first)
				if !rlsCallOK(client) {
					t.Fatalf("a connection that made a call no longer answers after %v", time.Since(start))
				}
				return
			}
			_ = conn.SetReadDeadline(start.Add(5 * time.Second)) // bounds the test if the connection is kept
			_, err = io.Copy(io.Discard, bufio.NewReader(conn))
			var ne net.Error
			timedOut := errors.As(err, &ne) && ne.Timeout()
			switch took := time.Since(start); {
			case timedOut || took > 3*time.Second:
				t.Fatalf("an unused connection was kept %v (first-request timeout %v)", took, first)
			case took < first/2: // the timer starts at accept, a little before start
				t.Fatalf("an unused connection was closed after %v, before the first-request timeout %v", took, first)
			}
		})
	}
	if got := metricValue(t, reg, "sluice_rls_connections_unused_closed_total"); got != 2 {
		t.Fatalf("sluice_rls_connections_unused_closed_total = %v, want 2", got)
	}
}
