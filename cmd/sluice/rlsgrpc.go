package main

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
)

// Bounds of the gRPC server of --rls-addr, those of the API port's HTTP/2
// server where it has them.
const (
	// rlsMaxStreams caps the calls in flight on one connection: net/http's
	// HTTP/2 default, which the API port keeps.
	rlsMaxStreams = 250
	// rlsMaxHeaderBytes caps a call's header list, like the API port's
	// MaxHeaderBytes.
	rlsMaxHeaderBytes = 64 << 10
	// rlsPingInterval is how long a connection may be silent before the
	// server pings it, and rlsPingTimeout how long it then waits for the
	// answer before closing it: a vanished Envoy's connections are freed
	// within about 80 s.
	rlsPingInterval = time.Minute
	rlsPingTimeout  = 20 * time.Second
	// rlsMinPingInterval is the shortest interval between a client's pings
	// that the server tolerates, with or without calls in flight; a client
	// that pings more often is sent GOAWAY (too_many_pings).
	rlsMinPingInterval = 10 * time.Second
)

// rlsServerOptions are the options of the gRPC server of --rls-addr beside
// the service's own: creds, the stream and header bounds, keepalive, and a
// connection closed (GOAWAY) after idleTimeout without a call, like the API
// port's.
func rlsServerOptions(creds credentials.TransportCredentials) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.Creds(creds),
		grpc.NumStreamWorkers(rlsStreamWorkers()),
		grpc.MaxConcurrentStreams(rlsMaxStreams),
		grpc.MaxHeaderListSize(rlsMaxHeaderBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: idleTimeout,
			Time:              rlsPingInterval,
			Timeout:           rlsPingTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             rlsMinPingInterval,
			PermitWithoutStream: true,
		}),
	}
}

// rlsStreamWorkers is the number of goroutines that serve the calls of
// --rls-addr, kept from call to call (16 per core): a call finds its worker's
// stack grown already, where a goroutine of its own grows a new one at every
// call (runtime.morestack; docs/benchmarks/envoy-rls.md measures what that
// costs). A call that finds every worker busy gets a goroutine of its own,
// as without workers.
func rlsStreamWorkers() uint32 {
	return uint32(16 * runtime.GOMAXPROCS(0))
}

// rlsCredentials are the transport credentials of --rls-addr: TLS with
// certs (nil: plaintext h2c). The connection each handshake returns carries
// the *trackedConn of the connLimiter that accepted it in its AuthInfo (see
// trackedInfo), and a failed TLS handshake is counted in
// sluice_tls_handshake_errors_total and logged at debug level only, as on
// the API port.
type rlsCredentials struct {
	credentials.TransportCredentials
	certs *tlsCertificates
}

// newRLSCredentials returns the credentials of --rls-addr over certs.
func newRLSCredentials(certs *tlsCertificates) *rlsCredentials {
	if certs == nil {
		return &rlsCredentials{TransportCredentials: insecure.NewCredentials()}
	}
	return &rlsCredentials{TransportCredentials: credentials.NewTLS(certs.grpcConfig()), certs: certs}
}

// ServerHandshake runs the handshake of the wrapped credentials on raw.
func (c *rlsCredentials) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		if c.certs != nil {
			c.certs.metrics.handshakeErrors.Inc()
			c.certs.log.Debug("tls: handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
		}
		return nil, nil, err
	}
	tc, _ := raw.(*trackedConn)
	return conn, trackedInfo{AuthInfo: info, conn: tc}, nil
}

// Clone returns a copy of c.
func (c *rlsCredentials) Clone() credentials.TransportCredentials {
	return &rlsCredentials{TransportCredentials: c.TransportCredentials.Clone(), certs: c.certs}
}

// trackedInfo is the AuthInfo of a connection to --rls-addr: the
// credentials' own, and the connection as the connLimiter accepted it (nil
// if it did not).
type trackedInfo struct {
	credentials.AuthInfo
	conn *trackedConn
}

// grpcConfig returns the tls.Config of the gRPC server of --rls-addr: that
// of serverConfig (TLS 1.2 at least, the certificates in force at each
// handshake, so SIGHUP reloads apply to new connections) with ALPN h2
// only, the one protocol it serves.
func (t *tlsCertificates) grpcConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cfg := t.current.Load().Clone()
		cfg.NextProtos = []string{"h2"}
		return cfg, nil
	}
	return base
}

// trackedRLS serves ShouldRateLimit with the wrapped server, marking the
// call's connection used (see connLimiter) and counting the call as running
// in reqs while it runs.
type trackedRLS struct {
	rlsv3.RateLimitServiceServer
	reqs *requests
}

// ShouldRateLimit marks the connection used and runs the wrapped call.
func (s trackedRLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(trackedInfo); ok && info.conn != nil {
			info.conn.markUsed()
		}
	}
	s.reqs.begin()
	defer s.reqs.end()
	return s.RateLimitServiceServer.ShouldRateLimit(ctx, req)
}

// serveGRPC serves rl on ln with opts in the background, every call tracked
// by the returned requests. Serve's result is sent on the returned channel.
func serveGRPC(rl rlsv3.RateLimitServiceServer, ln net.Listener, opts []grpc.ServerOption) (*grpc.Server, *requests, <-chan error) {
	reqs := newRequests()
	srv := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(srv, trackedRLS{RateLimitServiceServer: rl, reqs: reqs})
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	return srv, reqs, serveErr
}

// drainGRPC shuts srv down like drain does the API port: it stops
// accepting and lets the calls in flight finish (GracefulStop) for up to
// timeout. If some still run then, it cuts them (Stop: their contexts are
// cancelled, so a decision waiting on the origin is made locally at once,
// and every connection is closed) and waits up to grace for their handlers
// to return; one that outlives the grace is logged.
func drainGRPC(srv *grpc.Server, reqs *requests, serveErr <-chan error, timeout, grace time.Duration, log *slog.Logger) {
	log.Info("shutting down: draining in-flight calls", "timeout", timeout)
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	drained := time.NewTimer(timeout)
	defer drained.Stop()
	select {
	case <-stopped:
	case <-drained.C:
		log.Warn("drain timed out; cutting the calls still running", "running", reqs.running.Load(), "grace", grace)
		srv.Stop()
		<-stopped
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		if n := reqs.wait(ctx); n > 0 {
			log.Error("call handlers still running after the cut; what they admit from now on may miss the final flush", "running", n, "grace", grace)
		} else {
			log.Info("cut calls answered; every call handler returned")
		}
	}
	if err := <-serveErr; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		log.Warn("grpc server stopped with an error", "err", err)
	}
}
