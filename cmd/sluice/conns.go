package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// readHeaderTimeout bounds the wait for a request's headers on HTTP/1, and
// so the time an HTTP/1 connection may stay open before its first request.
// firstRequestTimeout applies the same bound to every connection, h2c
// included: one that has started no request by then is closed.
const (
	readHeaderTimeout   = 10 * time.Second
	firstRequestTimeout = readHeaderTimeout
)

// rejectLogInterval is the shortest time between two log lines about
// connections refused at the cap.
const rejectLogInterval = 10 * time.Second

// connListener names a capped listener in its metrics and log lines.
type connListener struct {
	metrics string // prefix of its metric names
	port    string // the listener, in the metrics' help
	flag    string // the flag of its cap
}

// The capped listeners: the API port and the Envoy RLS listener. Each has
// metrics of its own name rather than a listener label: every series of a
// metric carries the same labels, so a label would rename the API port's
// unlabelled series.
var (
	apiListener = connListener{metrics: "sluice_http_connections", port: "the API port", flag: "--max-conns"}
	rlsListener = connListener{metrics: "sluice_rls_connections", port: "the Envoy RLS listener (--rls-addr)", flag: "--rls-max-conns"}
)

// connMetrics are the metrics of a capped listener's connections.
type connMetrics struct {
	rejected prometheus.Counter
	unused   prometheus.Counter
}

func newConnMetrics(reg prometheus.Registerer, ln connListener, firstRequest time.Duration, open func() float64) *connMetrics {
	m := &connMetrics{
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: ln.metrics + "_rejected_total",
			Help: fmt.Sprintf("Connections to %s closed at accept because %s were open.", ln.port, ln.flag),
		}),
		unused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: ln.metrics + "_unused_closed_total",
			Help: fmt.Sprintf("Connections to %s closed because they started no request within %v of accept.", ln.port, firstRequest),
		}),
	}
	reg.MustRegister(m.rejected, m.unused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: ln.metrics + "_open",
		Help: fmt.Sprintf("Connections open on %s.", ln.port),
	}, open))
	return m
}

// connLimiter is a listener that keeps at most max connections open: one
// accepted beyond them is closed at once (with a reset, so that it holds no
// socket in TIME_WAIT) and counted, and Accept goes on to the next. Every
// connection it returns is closed if it starts no request within
// firstRequest (see markUsed), whatever its protocol: HTTP/1 bounds this
// with its header timeout, but an h2c connection that sent only its preface
// would otherwise be kept for the idle timeout.
type connLimiter struct {
	net.Listener
	name         connListener
	max          int64
	firstRequest time.Duration
	metrics      *connMetrics
	log          *slog.Logger

	open       atomic.Int64
	lastLog    atomic.Int64 // Unix nanoseconds of the last line about refused connections
	suppressed atomic.Int64 // refused connections not logged since
}

// limitConns wraps ln, the listener name, in a connLimiter of maxConns
// connections; its metrics are registered in reg under name's prefix.
func limitConns(ln net.Listener, name connListener, maxConns int, firstRequest time.Duration, reg prometheus.Registerer, log *slog.Logger) *connLimiter {
	l := &connLimiter{Listener: ln, name: name, max: int64(maxConns), firstRequest: firstRequest, log: log}
	l.metrics = newConnMetrics(reg, name, firstRequest, func() float64 { return float64(l.open.Load()) })
	return l
}

// Accept returns the next connection that fits under the cap.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refuse(c)
			continue
		}
		tc := &trackedConn{Conn: c, l: l}
		tc.timer = time.AfterFunc(l.firstRequest, tc.closeUnused)
		return tc, nil
	}
}

// refuse counts c, closes it, and logs at most one line per
// rejectLogInterval. The count comes first: a client that sees the reset
// finds it in the metric.
func (l *connLimiter) refuse(c net.Conn) {
	l.metrics.rejected.Inc()
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Close()
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(rejectLogInterval) || !l.lastLog.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return
	}
	l.log.Warn("connection refused: "+l.name.flag+" connections are open", "max_conns", l.max, "remote", c.RemoteAddr().String(),
		"suppressed", l.suppressed.Swap(0))
}

// trackedConn is a connection of a connLimiter: its Close frees its place
// under the cap, once.
type trackedConn struct {
	net.Conn
	l     *connLimiter
	timer *time.Timer
	used  atomic.Bool
	once  sync.Once
}

// Close closes the connection and frees its place.
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.timer.Stop()
		c.l.open.Add(-1)
	})
	return err
}

// closeUnused closes the connection unless it has started a request.
func (c *trackedConn) closeUnused() {
	if !c.used.Load() {
		c.l.metrics.unused.Inc()
		_ = c.Close()
	}
}

// connKey is the context key of a request's *trackedConn.
type connKey struct{}

// connContext is the http.Server's ConnContext: it puts the connection, if
// a connLimiter accepted it, in the context of its requests.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// markUsed records that the connection of ctx has started a request, so
// that it is no longer closed as unused.
func markUsed(ctx context.Context) {
	if tc, ok := ctx.Value(connKey{}).(*trackedConn); ok {
		tc.markUsed()
	}
}

// markUsed records that c has started a request, so that it is no longer
// closed as unused.
func (c *trackedConn) markUsed() {
	if !c.used.Load() {
		c.used.Store(true)
		c.timer.Stop()
	}
}
