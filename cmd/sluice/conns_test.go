package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// serveLimited serves an "ok" handler through serveAPI on a loopback
// listener capped at maxConns, and returns its address and metrics.
func serveLimited(t *testing.T, maxConns int, firstRequest time.Duration) (string, *prometheus.Registry) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	log := slog.New(slog.DiscardHandler)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	srv, _, serveErr := serveAPI(h, limitConns(ln, apiListener, maxConns, firstRequest, reg, log), nil, log)
	t.Cleanup(func() {
		_ = srv.Close()
		<-serveErr
	})
	return ln.Addr().String(), reg
}

// keepAliveGet sends a keep-alive GET on conn and reports whether it was answered.
func keepAliveGet(conn net.Conn, br *bufio.Reader) bool {
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return false
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return false
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	return err == nil && res.StatusCode == http.StatusOK && string(body) == "ok"
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestMaxConns opens N+5 keep-alive connections to a listener capped at
// N: the first N are served, the 5 others closed at accept and counted;
// once a served connection closes, its place serves a new one.
func TestMaxConns(t *testing.T) {
	const n = 4
	addr, reg := serveLimited(t, n, time.Minute)
	type client struct {
		conn net.Conn
		br   *bufio.Reader
	}
	var served []client
	refused := 0
	for range n + 5 {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil { // the reset of a refused connection can come before connect returns
			refused++
			continue
		}
		defer conn.Close()
		c := client{conn, bufio.NewReader(conn)}
		if keepAliveGet(c.conn, c.br) {
			served = append(served, c)
		} else {
			refused++
		}
	}
	if len(served) != n || refused != 5 {
		t.Fatalf("%d connections served and %d refused, want %d and 5", len(served), refused, n)
	}
	for i, c := range served { // still open and served
		if !keepAliveGet(c.conn, c.br) {
			t.Fatalf("served connection %d no longer answers", i)
		}
	}
	if got := metricValue(t, reg, "sluice_http_connections_rejected_total"); got != 5 {
		t.Fatalf("sluice_http_connections_rejected_total = %v, want 5", got)
	}
	served[0].conn.Close()
	waitFor(t, "the closed connection's place", func() bool { return metricValue(t, reg, "sluice_http_connections_open") == n-1 })
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !keepAliveGet(conn, bufio.NewReader(conn)) {
		t.Fatal("a new connection is refused after a served one closed")
	}
}

// h2cPreface is what an h2c client sends first: the connection preface and
// an empty SETTINGS frame.
const h2cPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// TestFirstRequestTimeout checks that a connection that starts no request
// within the first-request timeout is closed, over h2c (which the HTTP/1
// header timeout does not bound) as over HTTP/1, and that connections that
// made a request, HTTP/1 or h2c, are kept past it.
func TestFirstRequestTimeout(t *testing.T) {
	const first = 500 * time.Millisecond
	addr, reg := serveLimited(t, 100, first)
	closedWithin := func(conn net.Conn) time.Duration {
		start := time.Now()
		_ = conn.SetReadDeadline(start.Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, conn)
		return time.Since(start)
	}
	for _, tc := range []struct{ name, send string }{
		{"h2c preface only", h2cPreface},
		{"nothing", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, _ = io.WriteString(conn, tc.send)
			if d := closedWithin(conn); d > 3*time.Second {
				t.Fatalf("an unused connection was kept %v", d)
			}
		})
	}
	t.Run("used connections are kept", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		var protocols http.Protocols
		protocols.SetUnencryptedHTTP2(true)
		h2c := &http.Client{Transport: &http.Transport{Protocols: &protocols}}
		defer h2c.CloseIdleConnections()
		var reused []bool
		h2cGet := func() {
			trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, "http://"+addr+"/", nil)
			res, err := h2c.Do(req)
			if err != nil || res.ProtoMajor != 2 {
				t.Fatalf("h2c request: %v %v", res, err)
			}
			res.Body.Close()
		}
		if !keepAliveGet(conn, br) {
			t.Fatal("HTTP/1 request not served")
		}
		h2cGet()
		time.Sleep(2 * first)
		if !keepAliveGet(conn, br) {
			t.Fatal("an HTTP/1 connection that made a request was closed")
		}
		h2cGet()
		if len(reused) != 2 || !reused[1] {
			t.Fatalf("h2c connection reused: %v; want the second request on the first connection", reused)
		}
	})
	if got := metricValue(t, reg, "sluice_http_connections_unused_closed_total"); got != 2 {
		t.Fatalf("sluice_http_connections_unused_closed_total = %v, want 2", got)
	}
}

// metricValue returns the value of the unlabelled counter or gauge name.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}
