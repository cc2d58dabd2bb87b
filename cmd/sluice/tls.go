package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TLSFlags are the flags of TLS on the API port, embedded in serveCmd.
type TLSFlags struct {
	TLSCert     string `name:"tls-cert" placeholder:"FILE" help:"PEM certificate (chain) of the API port: serves TLS (HTTP/1.1 and HTTP/2 by ALPN, gRPC) instead of plaintext. Needs --tls-key. SIGHUP reloads it."`
	TLSKey      string `name:"tls-key" placeholder:"FILE" help:"PEM private key of --tls-cert."`
	TLSClientCA string `name:"tls-client-ca" placeholder:"FILE" help:"PEM CA certificates: clients must present a certificate signed by one of them (mutual TLS). Needs --tls-cert. SIGHUP reloads it."`
}

// validate checks that the TLS flags come together.
func (f *TLSFlags) validate() error {
	switch {
	case (f.TLSCert == "") != (f.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case f.TLSClientCA != "" && f.TLSCert == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	}
	return nil
}

// tlsEnabled reports whether the API port serves TLS.
func (f *TLSFlags) tlsEnabled() bool { return f.TLSCert != "" }

// tlsCertificates is the TLS configuration of the API port, read from the
// files of TLSFlags and replaced whole by reload: the server's tls.Config
// answers every handshake with the configuration in force
// (GetConfigForClient), so new connections get a reloaded certificate while
// established ones keep theirs.
type tlsCertificates struct {
	files   TLSFlags
	log     *slog.Logger
	metrics *tlsMetrics
	current atomic.Pointer[tls.Config]
}

// newTLSCertificates loads the files of f; a file that fails to load stops
// the start.
func newTLSCertificates(f TLSFlags, log *slog.Logger, reg prometheus.Registerer) (*tlsCertificates, error) {
	t := &tlsCertificates{files: f, log: log, metrics: newTLSMetrics(reg)}
	cfg, leaf, err := f.load()
	if err != nil {
		return nil, err
	}
	t.install(cfg, leaf)
	return t, nil
}

// serverConfig returns the tls.Config of the API's http.Server: TLS 1.2 at
// least, ALPN h2 and http/1.1 (gRPC rides on h2), and the certificates in
// force at each handshake.
func (t *tlsCertificates) serverConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return t.current.Load(), nil }
	return base
}

// reload reads the files again and installs them for new connections; if
// they do not load, it logs why and the configuration in force stays.
func (t *tlsCertificates) reload() {
	cfg, leaf, err := t.files.load()
	t.metrics.reloaded(err)
	if err != nil {
		t.log.Error("tls: reload failed; keeping the certificate in force", "cert", t.files.TLSCert, "err", err)
		return
	}
	t.install(cfg, leaf)
}

// install puts cfg in force and logs its certificate.
func (t *tlsCertificates) install(cfg *tls.Config, leaf *x509.Certificate) {
	t.current.Store(cfg)
	t.metrics.expiry.Set(float64(leaf.NotAfter.Unix()))
	t.log.Info("tls: certificate in force", "cert", t.files.TLSCert, "subject", leaf.Subject.String(), "dns_names", leaf.DNSNames,
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "client_ca", t.files.TLSClientCA)
	if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		t.log.Warn("tls: the certificate is not valid now; clients will refuse it", "not_before", leaf.NotBefore.UTC().Format(time.RFC3339), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
}

// load reads the certificate, its key and, if set, the client CAs, and
// returns the tls.Config of one handshake and the leaf certificate.
func (f TLSFlags) load() (*tls.Config, *x509.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(f.TLSCert, f.TLSKey)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("--tls-cert: %w", err)
		}
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
		Certificates: []tls.Certificate{pair},
	}
	if f.TLSClientCA != "" {
		pem, err := os.ReadFile(f.TLSClientCA)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--tls-client-ca %s: no PEM certificate in the file", f.TLSClientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, leaf, nil
}

// serveTLS returns srv's Serve over TLS with t's configuration: HTTP/1.1
// and HTTP/2 negotiated by ALPN, no h2c (it is only for plaintext). Failed
// handshakes (scanners, plaintext clients, clients without a certificate
// under mTLS) are counted in sluice_tls_handshake_errors_total and logged at
// debug level only, so that they cannot flood the log.
func (t *tlsCertificates) serveTLS(srv *http.Server) func(net.Listener) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	srv.Protocols = &protocols
	srv.TLSConfig = t.serverConfig()
	srv.ErrorLog = stdlog.New(&serverErrors{log: t.log, handshakes: t.metrics.handshakeErrors}, "", 0)
	return func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
}

// peerClient returns the HTTP client with which a cluster node calls its
// peers' RPC on their TLS API ports: TLS 1.2 at least, HTTP/2 by ALPN, the
// peers' certificates verified against the system roots (SSL_CERT_FILE and
// SSL_CERT_DIR apply) and the --tls-client-ca certificates, and this node's
// certificate in force sent when a peer asks for one (mutual TLS). A peer's
// certificate must name the address it advertises for its RPC.
func (t *tlsCertificates) peerClient() (*http.Client, error) {
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if ca := t.files.TLSClientCA; ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		roots.AppendCertsFromPEM(pem)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &t.current.Load().Certificates[0], nil
		},
	}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 8, IdleConnTimeout: 90 * time.Second}
	return &http.Client{Transport: tr}, nil
}

// serverErrors receives the http.Server's error log: failed TLS handshakes
// are counted and logged at debug level, anything else is a warning.
type serverErrors struct {
	log        *slog.Logger
	handshakes prometheus.Counter
}

func (w *serverErrors) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		w.handshakes.Inc()
		w.log.Debug(msg)
	} else {
		w.log.Warn(msg)
	}
	return len(p), nil
}

// tlsMetrics are the metrics of TLS on the API port.
type tlsMetrics struct {
	reloads         *prometheus.CounterVec
	expiry          prometheus.Gauge
	handshakeErrors prometheus.Counter
}

func newTLSMetrics(reg prometheus.Registerer) *tlsMetrics {
	m := &tlsMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tls_reloads_total", Help: "Reloads of the API port's certificate, key and client CAs (SIGHUP) by result.",
		}, []string{"result"}),
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_tls_certificate_expiry_timestamp_seconds", Help: "Expiry (NotAfter, Unix seconds) of the API port's certificate in force.",
		}),
		handshakeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_tls_handshake_errors_total", Help: "TLS handshakes on the API port that failed (plaintext clients, unknown CAs, missing client certificates).",
		}),
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	reg.MustRegister(m.reloads, m.expiry, m.handshakeErrors)
	return m
}

// reloaded counts one reload.
func (m *tlsMetrics) reloaded(err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.reloads.WithLabelValues(result).Inc()
}
