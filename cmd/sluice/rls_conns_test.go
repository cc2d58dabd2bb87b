package main

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// serveRLSListener serves an "ok" handler through serveRLS on a loopback
// --rls-addr capped at maxConns connections, each closed if it starts no
// request within firstRequest, and returns its address and metrics. The
// listener is drained at the end of the test.
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
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	if err := c.serveRLS(h, log, reg, &hangup{}, &cl); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`msg="envoy rls listening" addr=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no listening address in the log:\n%s", logs.String())
	}
	return m[1], reg
}

// TestRLSListenerMaxConns opens N+3 keep-alive connections to an --rls-addr
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
		if keepAliveGet(conn, bufio.NewReader(conn)) {
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
// --rls-addr that starts no request within the first-request timeout is
// closed, h2c preface-only (which HTTP/1's header timeout does not bound)
// as well as silent, and that one that made a request is kept past it.
func TestRLSListenerFirstRequestTimeout(t *testing.T) {
	const first = 300 * time.Millisecond
	addr, reg := serveRLSListener(t, 100, first)
	sendPreface := func(conn net.Conn, _ *bufio.Reader) bool {
		_, err := io.WriteString(conn, h2cPreface)
		return err == nil
	}
	for _, tc := range []struct {
		name   string
		open   func(conn net.Conn, br *bufio.Reader) bool // what the client does first; false: it failed
		closed bool
	}{
		{"h2c preface only", sendPreface, true},
		{"nothing", func(net.Conn, *bufio.Reader) bool { return true }, true},
		{"a request first", keepAliveGet, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			start := time.Now()
			if !tc.open(conn, br) {
				t.Fatal("the client's first step failed")
			}
			wait := 5 * time.Second // bounds the test if the connection is kept
			if !tc.closed {
				wait = 3 * first
			}
			_ = conn.SetReadDeadline(start.Add(wait))
			_, err = io.Copy(io.Discard, br)
			var ne net.Error
			timedOut := errors.As(err, &ne) && ne.Timeout()
			took := time.Since(start)
			switch {
			case tc.closed && (timedOut || took > 3*time.Second):
				t.Fatalf("an unused connection was kept %v (first-request timeout %v)", took, first)
			case tc.closed && took < first/2: // the timer starts at accept, a little before start
				t.Fatalf("an unused connection was closed after %v, before the first-request timeout %v", took, first)
			case !tc.closed && !timedOut:
				t.Fatalf("a connection that made a request was closed after %v: %v", took, err)
			case !tc.closed && !keepAliveGet(conn, br):
				t.Fatal("a connection that made a request no longer answers")
			}
		})
	}
	if got := metricValue(t, reg, "sluice_rls_connections_unused_closed_total"); got != 2 {
		t.Fatalf("sluice_rls_connections_unused_closed_total = %v, want 2", got)
	}
}
