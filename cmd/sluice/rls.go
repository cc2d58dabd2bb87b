package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/server/rls"
)

// RLSFlags are the flags of the Envoy RLS listener, embedded in serveCmd.
type RLSFlags struct {
	RLSAddr     string `name:"rls-addr" placeholder:"HOST:PORT" help:"Serve Envoy RLS (--rls-config) on a listener of its own instead of --http-addr, with grpc-go: gRPC only (gRPC-Web and Connect clients use --http-addr without --rls-addr), over h2c, or TLS with the --tls-cert certificate; answers are never compressed. Recommended: only Envoy should reach it (network policy, --rls-client-ca). Port 0 picks a free port (logged)."`
	RLSClientCA string `name:"rls-client-ca" placeholder:"FILE" help:"PEM CA certificates: Envoy must present a certificate signed by one of them on --rls-addr (mutual TLS). Needs --rls-addr and --tls-cert. SIGHUP reloads it."`
	RLSMaxConns int    `name:"rls-max-conns" default:"10000" help:"Most connections open at once on --rls-addr, counted apart from --max-conns; one more is closed at accept and counted in sluice_rls_connections_rejected_total. An Envoy holds about one per worker thread; an idle one costs about 30 KB (10,000: some 300 MB)."`
}

// validate checks the RLS listener's flags beside --rls-config and the TLS
// flags.
func (f *RLSFlags) validate(rlsConfig string, t TLSFlags) error {
	switch {
	case f.RLSAddr != "" && rlsConfig == "":
		return errors.New("--rls-addr needs --rls-config")
	case f.RLSClientCA != "" && f.RLSAddr == "":
		return errors.New("--rls-client-ca needs --rls-addr (on --http-addr, --tls-client-ca applies)")
	case f.RLSClientCA != "" && t.TLSCert == "":
		return errors.New("--rls-client-ca needs --tls-cert and --tls-key: the RLS listener serves that certificate")
	case f.RLSAddr != "" && f.RLSMaxConns < 1:
		return errors.New("--rls-max-conns must be at least 1")
	}
	if f.RLSAddr != "" {
		if _, _, err := net.SplitHostPort(f.RLSAddr); err != nil {
			return fmt.Errorf("--rls-addr %q: %w", f.RLSAddr, err)
		}
	}
	return nil
}

// newRLS loads --rls-config and builds the Envoy RLS service. With
// --rls-addr it serves it with grpc-go on a listener of its own (serveRLS),
// drained at cleanup, and returns no route for the API port; without, it returns the route to
// mount on --http-addr (and nil services when --rls-config is unset). An
// invalid file stops the start with the loader's error, which names the
// file and the problem.
func (c *serveCmd) newRLS(limiter rls.Limiter, rec rls.Recorder, log *slog.Logger, obs observability, hup *hangup, cl *cleanup) (*rls.Service, map[string]http.Handler, error) {
	if c.RLSConfig == "" {
		return nil, nil, nil
	}
	rules, err := rls.Load(c.RLSConfig)
	if err != nil {
		return nil, nil, fmt.Errorf("--rls-config: %w", err)
	}
	svc, err := rls.New(rls.Config{Limiter: limiter, Domains: rules, Logger: log, Observer: obs.rls, Recorder: rec})
	if err != nil {
		return nil, nil, err
	}
	if c.RLSAddr == "" {
		path, h := svc.Handler()
		log.Info("envoy rls: serving on the API port; --rls-addr serves it on a listener of its own, which only Envoy should reach", "path", path, "config", c.RLSConfig, "domains", rules.Domains())
		return svc, map[string]http.Handler{path: h}, nil
	}
	if err := c.serveRLS(svc.GRPCServer(), svc.GRPCServerOptions(), log, obs.reg, hup, cl); err != nil {
		return nil, nil, err
	}
	log.Info("envoy rls: serving", "path", rls.Procedure, "config", c.RLSConfig, "domains", rules.Domains())
	return svc, nil, nil
}

// serveRLS serves rl on --rls-addr in the background with grpc-go, its
// options opts (the service's) beside those of rlsServerOptions: gRPC only
// (no gRPC-Web, no Connect), over h2c, or TLS with the API port's
// certificate when it has one, requiring a client certificate with
// --rls-client-ca. Like the API port, the listener keeps at most
// --rls-max-conns connections open and closes those that start no
// ShouldRateLimit call within the first-request timeout; its connection
// metrics, registered in reg, are named sluice_rls_connections_*. Cleanup
// drains it like the API port (drainGRPC).
func (c *serveCmd) serveRLS(rl rlsv3.RateLimitServiceServer, opts []grpc.ServerOption, log *slog.Logger, reg prometheus.Registerer, hup *hangup, cl *cleanup) error {
	certs, err := c.rlsCertificates(log, hup)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.RLSAddr)
	if err != nil {
		return fmt.Errorf("--rls-addr: listen on %s: %w", c.RLSAddr, err)
	}
	capped := limitConns(ln, rlsListener, c.RLSMaxConns, c.connFirstRequest(), reg, log)
	srv, reqs, serveErr := serveGRPC(rl, capped, append(rlsServerOptions(newRLSCredentials(certs)), opts...))
	cl.add(func() {
		log.Info("envoy rls: stopping")
		drainGRPC(srv, reqs, serveErr, c.ShutdownTimeout, cutGrace, log)
	})
	addr := ln.Addr().String()
	log.Info("envoy rls listening", "addr", addr, "protocol", "grpc", "tls", certs != nil, "client_ca", c.RLSClientCA, "max_conns", c.RLSMaxConns)
	if !isLoopback(addr) && c.RLSClientCA == "" {
		log.Warn("envoy rls: --rls-addr is not a loopback address and no --rls-client-ca is set: whoever reaches it can spend the counters of the configured domains; restrict it to Envoy (network policy) or require Envoy's certificate", "addr", addr)
	}
	return nil
}

// rlsCertificates returns the TLS configuration of the RLS listener: the
// API port's certificate and, with --rls-client-ca, a client CA of its own,
// reloaded on SIGHUP. It is nil without --tls-cert.
func (c *serveCmd) rlsCertificates(log *slog.Logger, hup *hangup) (*tlsCertificates, error) {
	if c.certs == nil {
		return nil, nil
	}
	if c.RLSClientCA != "" {
		pem, err := os.ReadFile(c.RLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("--rls-client-ca: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--rls-client-ca %s: no PEM certificate in the file", c.RLSClientCA)
		}
	}
	files := c.TLSFlags
	files.TLSClientCA = c.RLSClientCA
	t := &tlsCertificates{files: files, log: log.With("listener", "envoy rls"), metrics: c.certs.metrics}
	cfg, leaf, err := files.load()
	if err != nil {
		return nil, fmt.Errorf("--rls-addr: %w", err)
	}
	t.install(cfg, leaf)
	hup.add(t.reload)
	return t, nil
}

// reloadRLS returns the reload of --rls-config into svc that SIGHUP runs: a
// file that fails to load is logged and the rules in force stay.
func (c *serveCmd) reloadRLS(svc *rls.Service, log *slog.Logger, metrics *rlsMetrics) func() {
	return func() {
		rules, err := rls.Load(c.RLSConfig)
		metrics.reloaded(err)
		if err != nil {
			log.Error("envoy rls: reload failed; keeping the rules in force", "config", c.RLSConfig, "err", err)
			return
		}
		svc.SetRuleset(rules)
	}
}
