package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testpki"
)

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestHashKey(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     string // "" = error
	}{
		{"one trailing newline removed", "sk_live_0123456789abc\n", sha256Hex("sk_live_0123456789abc")},
		{"CRLF removed", "sk_live_0123456789abc\r\n", sha256Hex("sk_live_0123456789abc")},
		{"no newline", "sk_live_0123456789abc", sha256Hex("sk_live_0123456789abc")},
		{"colon kept", "a:b_0123456789abcdef\n", sha256Hex("a:b_0123456789abcdef")},
		{"16 bytes", "0123456789abcdef\n", sha256Hex("0123456789abcdef")},
		{"15 bytes refused", "0123456789abcde\n", ""},
		{"only one newline removed", "sk_live_0123456789abc\n\n", ""},
		{"empty", "", ""},
		{"only a newline", "\n", ""},
		{"inner space", "a b_0123456789abcdef\n", ""},
		{"too long", strings.Repeat("k", maxKeyBytes+1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), []string{"hash-key"}, strings.NewReader(tc.in), &out, &errOut)
			if tc.want == "" {
				if code == 0 {
					t.Fatalf("exit 0, output %q; want an error", out.String())
				}
				if k := strings.TrimSpace(tc.in); k != "" && strings.Contains(errOut.String(), k) {
					t.Fatalf("the error quotes the key: %q", errOut.String())
				}
				return
			}
			if code != 0 || out.String() != tc.want+"\n" {
				t.Fatalf("exit %d, output %q %q; want %q", code, out.String(), errOut.String(), tc.want)
			}
		})
	}
}

func TestRootKeys(t *testing.T) {
	c := serveCmd{RootKey: []string{"plain-0123456789abc:acme"}, RootKeySHA256: []string{sha256Hex("hashed") + ":globex", " "}}
	keys, err := c.rootKeys()
	if err != nil || len(keys) != 2 || keys[0].Key != "plain-0123456789abc" || keys[1].Key != "" || hex.EncodeToString(keys[1].SHA256[:]) != sha256Hex("hashed") || keys[1].Workspace != "globex" {
		t.Fatalf("rootKeys() = %+v, %v", keys, err)
	}
}

// TestPlaintextWarning checks the start-up warnings about root keys: in the
// clear on a non-loopback address without TLS, and none on loopback or with
// TLS.
func TestPlaintextWarning(t *testing.T) {
	hashed := []string{sha256Hex("k") + ":acme"}
	for _, tc := range []struct {
		name  string
		cmd   serveCmd
		clear bool
	}{
		{"loopback without TLS", serveCmd{HTTPAddr: "127.0.0.1:7070", RootKeySHA256: hashed}, false},
		{"all interfaces without TLS", serveCmd{HTTPAddr: "0.0.0.0:7070", RootKeySHA256: hashed}, true},
		{"all interfaces with TLS", serveCmd{HTTPAddr: "0.0.0.0:7070", RootKeySHA256: hashed, TLSFlags: TLSFlags{TLSCert: "c", TLSKey: "k"}}, false},
		{"no key on loopback", serveCmd{HTTPAddr: "[::1]:7070"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			if _, err := tc.cmd.checkRootKeys(slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(logs.String(), "root keys travel in the clear"); got != tc.clear {
				t.Fatalf("warning %v, want %v:\n%s", got, tc.clear, logs.String())
			}
		})
	}
	if _, err := (&serveCmd{HTTPAddr: "0.0.0.0:7070"}).checkRootKeys(slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--root-key-sha256") {
		t.Fatalf("no key on a public address: %v", err)
	}
}

func TestSecurityFlagsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*serveCmd)
		want   string // "" = valid
	}{
		{"tls pair", func(c *serveCmd) { c.TLSCert, c.TLSKey = "c", "k" }, ""},
		{"tls pair and client ca", func(c *serveCmd) { c.TLSCert, c.TLSKey, c.TLSClientCA = "c", "k", "ca" }, ""},
		{"tls cert without key", func(c *serveCmd) { c.TLSCert = "c" }, "--tls-key"},
		{"tls key without cert", func(c *serveCmd) { c.TLSKey = "k" }, "--tls-cert"},
		{"client ca without tls", func(c *serveCmd) { c.TLSClientCA = "ca" }, "--tls-client-ca"},
		{"admin off", func(c *serveCmd) { c.AdminAddr = "" }, ""},
		{"admin addr without port", func(c *serveCmd) { c.AdminAddr = "127.0.0.1" }, "--admin-addr"},
		{"hashed key", func(c *serveCmd) { c.RootKeySHA256 = []string{sha256Hex("k") + ":acme"} }, ""},
		{"plaintext key as a hash", func(c *serveCmd) { c.RootKeySHA256 = []string{"k:acme"} }, "--root-key-sha256"},
		{"key and its hash", func(c *serveCmd) {
			c.RootKey, c.RootKeySHA256 = []string{"key-0123456789abcdef:a"}, []string{sha256Hex("key-0123456789abcdef") + ":b"}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serveCmd{HTTPAddr: "127.0.0.1:0", Region: "local", DataDir: "d", ShutdownTimeout: 1, OverrideRefresh: 1, MaxConns: 10,
				GlobalFlags: GlobalFlags{GlobalInterval: time.Second, DenialMinUsage: 0.5}, AdminFlags: AdminFlags{AdminAddr: "127.0.0.1:0"}}
			tc.mutate(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// TestTLSReload loads a pair, then reloads a broken one (the pair in force
// stays) and a new one (it replaces it), and a client CA file without a
// certificate (refused).
func TestTLSReload(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "test CA")
	first := ca.Server(t, "first")
	certFile, keyFile := first.Files(t, dir, "server")
	caFile := filepath.Join(dir, "ca.pem")
	testpki.WriteFile(t, caFile, ca.PEM)
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	certs, err := newTLSCertificates(TLSFlags{TLSCert: certFile, TLSKey: keyFile, TLSClientCA: caFile}, slog.New(slog.NewTextHandler(&logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	inForce := func() string {
		cfg, err := certs.serverConfig().GetConfigForClient(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if cfg.MinVersion < 0x0303 || cfg.ClientCAs == nil || !strings.Contains(strings.Join(cfg.NextProtos, ","), "h2") {
			t.Fatalf("config in force: %+v", cfg)
		}
		return leaf.Subject.CommonName
	}
	if got := inForce(); got != "first" {
		t.Fatalf("in force: %s", got)
	}

	for _, tc := range []struct {
		name  string
		write func()
		want  string
		ok    bool
	}{
		{"key of another certificate", func() { testpki.WriteFile(t, keyFile, ca.Server(t, "other").KeyPEM) }, "first", false},
		{"truncated certificate", func() { testpki.WriteFile(t, certFile, first.CertPEM[:40]) }, "first", false},
		{"new pair", func() { ca.Server(t, "second").Write(t, certFile, keyFile) }, "second", true},
		{"client CA without a certificate", func() { testpki.WriteFile(t, caFile, []byte("nothing\n")) }, "second", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs.Reset()
			tc.write()
			certs.reload()
			if got := inForce(); got != tc.want {
				t.Fatalf("in force after reload: %s, want %s", got, tc.want)
			}
			if failed := strings.Contains(logs.String(), "reload failed"); failed == tc.ok {
				t.Fatalf("reload ok=%v but logged:\n%s", tc.ok, logs.String())
			}
		})
	}
	if ok, failed := gauge(t, reg, "sluice_tls_reloads_total", "ok"), gauge(t, reg, "sluice_tls_reloads_total", "error"); ok != 1 || failed != 3 {
		t.Fatalf("reloads ok %v, error %v; want 1 and 3", ok, failed)
	}
}

// gauge returns the value of the series of name whose first label is value
// (a counter or a gauge).
func gauge(t *testing.T, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == value {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, value)
	return 0
}

func TestServerErrorsLog(t *testing.T) {
	var logs bytes.Buffer
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})
	w := &serverErrors{log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})), handshakes: c}
	_, _ = w.Write([]byte("http: TLS handshake error from 127.0.0.1:1: EOF\n"))
	_, _ = w.Write([]byte("http: Accept error: too many open files\n"))
	if strings.Contains(logs.String(), "handshake") || !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "Accept error") {
		t.Fatalf("logs:\n%s", logs.String())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, _ := reg.Gather()
	if len(mfs) != 1 || mfs[0].GetMetric()[0].GetCounter().GetValue() != 1 {
		t.Fatalf("handshake errors: %v", mfs)
	}
}

func TestReadiness(t *testing.T) {
	var r readiness
	check := func(want bool, why string) {
		t.Helper()
		if ok, got := r.status(); ok != want || !strings.Contains(got, why) {
			t.Fatalf("status() = %v %q, want %v %q", ok, got, want, why)
		}
	}
	check(false, "starting")
	reached := r.await("origin")
	r.listen()
	check(false, "origin")
	reached()
	check(true, "ready")
	r.stop()
	check(false, "shutting down")
}

// TestReadinessProbe checks that a dependency unreachable at start keeps
// /readyz at 503 until a later probe reaches it.
func TestReadinessProbe(t *testing.T) {
	var r readiness
	r.listen()
	fail := make(chan struct{})
	var pings atomic.Int32
	ping := func(context.Context) error {
		defer pings.Add(1) // counted once answered
		select {
		case <-fail:
			return nil
		default:
			return errors.New("refused")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	released := make(chan struct{})
	r.probe(ctx, "origin", ping, func() { close(released) }, slog.New(slog.DiscardHandler))
	for pings.Load() == 0 { // the first try, at once, fails
		time.Sleep(time.Millisecond)
	}
	if ok, why := r.status(); ok || !strings.Contains(why, "origin") {
		t.Fatalf("with the origin down: %v %q", ok, why)
	}
	close(fail)
	deadline := time.Now().Add(5 * time.Second)
	for ok, _ := r.status(); !ok; ok, _ = r.status() {
		if time.Now().After(deadline) {
			t.Fatal("not ready after the origin came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := pings.Load(); n < 2 {
		t.Fatalf("ready after %d pings, want a retry", n)
	}
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("the probe did not release its client")
	}
}

func TestAdminHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_test_total", Help: "t"}))
	var ready readiness
	var console lateHandler
	h := adminHandler(reg, &ready, &console)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != 503 {
		t.Fatalf("console before the API is built: %d, want 503", rec.Code)
	}
	console.set(http.NotFoundHandler()) // the console's own paths are server's TestConsoleHandler's
	for _, tc := range []struct {
		name, method, path string
		code               int
		body               string
	}{
		{"metrics", "GET", "/metrics", 200, "sluice_test_total 0"},
		{"pprof index", "GET", "/debug/pprof/", 200, "goroutine"},
		{"pprof heap", "GET", "/debug/pprof/heap?debug=1", 200, "heap profile"},
		{"pprof cmdline is not served", "GET", "/debug/pprof/cmdline", 404, "not served"},
		{"pprof cmdline by the index", "GET", "/debug/pprof/cmdline?debug=1", 404, "not served"},
		{"pprof symbol post", "POST", "/debug/pprof/symbol", 200, "num_symbols"},
		{"healthz", "GET", "/healthz", 200, "ok"},
		{"readyz while starting", "GET", "/readyz", 503, "starting"},
		{"no API here", "POST", "/v2/ratelimit.limit", 404, ""},
		{"metrics by POST", "POST", "/metrics", 405, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
				t.Fatalf("%s %s: %d %.200q", tc.method, tc.path, rec.Code, rec.Body.String())
			}
		})
	}
	ready.listen()
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != 200 {
		t.Fatalf("readyz once listening: %d %s", rec.Code, rec.Body.String())
	}
}

// TestTLSResumedSessionAfterCAReload checks that a session ticket issued
// before a reload of --tls-client-ca does not let in a client that the
// client CAs in force refuse: crypto/tls checks a resumed session's chains
// against the ClientCAs of the configuration that GetConfigForClient
// returns, so the client falls back to a full handshake and fails it.
func TestTLSResumedSessionAfterCAReload(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "old CA")
	certFile, keyFile := ca.Server(t, "server").Files(t, dir, "server")
	caFile := filepath.Join(dir, "ca.pem")
	testpki.WriteFile(t, caFile, ca.PEM)
	certs, err := newTLSCertificates(TLSFlags{TLSCert: certFile, TLSKey: keyFile, TLSClientCA: caFile}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", certs.serverConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverErrs := make(chan error, 8)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			err = conn.(*tls.Conn).Handshake()
			if err == nil {
				_, err = conn.Write([]byte("x")) // carries the session ticket to the client
			}
			serverErrs <- err
			conn.Close()
		}
	}()
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{ca.Client(t, "client").TLS(t)},
		ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	dial := func() (resumed bool, serverErr error) {
		t.Helper()
		conn, err := tls.Dial("tcp", ln.Addr().String(), client)
		if err == nil {
			_, _ = conn.Read(make([]byte, 1))
			resumed = conn.ConnectionState().DidResume
			conn.Close()
		}
		select {
		case serverErr = <-serverErrs:
		case <-time.After(5 * time.Second):
			t.Fatal("the server did not handshake")
		}
		return resumed, serverErr
	}
	if resumed, err := dial(); resumed || err != nil {
		t.Fatalf("first connection: resumed %v, %v", resumed, err)
	}
	if resumed, err := dial(); !resumed || err != nil {
		t.Fatalf("second connection: resumed %v, %v; want a resumed session", resumed, err)
	}
	testpki.WriteFile(t, caFile, testpki.NewCA(t, "new CA").PEM)
	certs.reload()
	if resumed, err := dial(); resumed || err == nil {
		t.Fatalf("after the client CA changed: resumed %v, server error %v; want the handshake refused", resumed, err)
	}
}
