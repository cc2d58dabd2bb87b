package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testpki"
)

// pki is the certificates of a TLS test, made at run time: a CA, the
// server's pair signed by it, and the files the server and clients read.
type pki struct {
	ca                        *testpki.CA
	dir                       string
	caFile, certFile, keyFile string
}

// newPKI makes a CA and a server certificate called "first" for loopback,
// and writes them to a temporary folder.
func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{ca: testpki.NewCA(t, "sluice e2e CA"), dir: t.TempDir()}
	p.certFile, p.keyFile = p.ca.Server(t, "first").Files(t, p.dir, "server")
	p.caFile = filepath.Join(p.dir, "ca.pem")
	testpki.WriteFile(t, p.caFile, p.ca.PEM)
	return p
}

// clientConfig returns a client TLS configuration trusting p's CA, with
// the client certificates certs.
func (p *pki) clientConfig(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: p.ca.Pool(), Certificates: certs}
}

// httpClient returns an HTTP client trusting p's CA that speaks HTTP/1.1 if
// h2 is false, else HTTP/2 only, with the client certificates certs.
func (p *pki) httpClient(h2 bool, certs ...tls.Certificate) *http.Client {
	var protocols http.Protocols
	protocols.SetHTTP1(!h2)
	protocols.SetHTTP2(h2)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: p.clientConfig(certs...), Protocols: &protocols}}
}

// startNode starts a node, over TLS with p's pair when p is not nil (its
// do then speaks HTTP/2 over TLS).
func startNode(t *testing.T, p *pki, env []string, args ...string) *node {
	t.Helper()
	if p == nil {
		return start(t, env, args...)
	}
	n := start(t, env, append([]string{"--tls-cert", p.certFile, "--tls-key", p.keyFile}, args...)...)
	n.HTTP = p.httpClient(true)
	return n
}

// hostPort is n's API address without the scheme.
func (n *node) hostPort() string {
	return strings.TrimPrefix(strings.TrimPrefix(n.URL, "https://"), "http://")
}

// serverName dials n over TLS with cfg and returns the common name of the
// certificate it presents on this new connection.
func serverName(t *testing.T, n *node, cfg *tls.Config) string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", n.hostPort(), cfg)
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

const limitBody = `{"namespace":"tls","identifier":"u","limit":100,"duration":60000}`

// TestTLS serves the API over TLS: HTTP/1.1 and HTTP/2 both answer through
// ALPN, TLS 1.1 is refused, and plaintext (HTTP/1.1 or h2c) to the TLS port
// gets no API answer.
func TestTLS(t *testing.T) {
	p := newPKI(t)
	n := startNode(t, p, nil, "--root-key", "tls-key-0123456789:acme")
	for _, tc := range []struct {
		name  string
		h2    bool
		proto string
	}{
		{"HTTP/1.1", false, "HTTP/1.1"},
		{"HTTP/2", true, "HTTP/2.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.HTTP = p.httpClient(tc.h2)
			var d limitData
			n.call("tls-key-0123456789", "limit", limitBody).data(t, &d)
			if !d.Success {
				t.Fatalf("limit over %s: %+v", tc.name, d)
			}
			res, err := n.HTTP.Get(n.URL + "/v2/liveness")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK || res.Proto != tc.proto || res.TLS == nil || res.TLS.Version < tls.VersionTLS12 {
				t.Fatalf("liveness: %d over %s, TLS %+v", res.StatusCode, res.Proto, res.TLS)
			}
		})
	}

	t.Run("TLS 1.1 refused", func(t *testing.T) {
		cfg := p.clientConfig()
		cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
		if conn, err := tls.Dial("tcp", n.hostPort(), cfg); err == nil {
			conn.Close()
			t.Fatal("a TLS 1.1 handshake succeeded")
		}
	})

	t.Run("plaintext HTTP/1.1", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", n.hostPort(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "POST /v2/ratelimit.limit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tls-key-0123456789\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(limitBody), limitBody)
		got, _ := io.ReadAll(conn)
		if strings.Contains(string(got), "requestId") || strings.Contains(string(got), "success") || strings.HasPrefix(string(got), "HTTP/1.1 200") {
			t.Fatalf("plaintext got an API answer: %q", got)
		}
	})

	t.Run("plaintext h2c", func(t *testing.T) {
		var protocols http.Protocols
		protocols.SetUnencryptedHTTP2(true)
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Protocols: &protocols}}
		res, err := c.Get("http://" + n.hostPort() + "/v2/liveness")
		if err == nil {
			res.Body.Close()
			t.Fatalf("h2c to the TLS port answered %d", res.StatusCode)
		}
	})

	// Only the two TLS calls were decided.
	if m := n.metrics(); !strings.Contains(m, `sluice_ratelimit_decisions_total{namespace="tls",outcome="passed"} 2`) {
		t.Errorf("decisions: %s", grepLines(m, "decisions_total"))
	}
	if m := n.metrics(); strings.Contains(m, "sluice_tls_handshake_errors_total 0") {
		t.Errorf("failed handshakes not counted: %s", grepLines(m, "handshake"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestMutualTLS requires client certificates: a client without one, or with
// one from another CA, is refused; a client with one is served, over HTTP
// and over gRPC (Envoy RLS).
func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	n := startNode(t, p, nil, "--tls-client-ca", p.caFile, "--root-key", "mtls-key-0123456789:acme", "--rls-config", writeFile(t, "rls.yaml", rlsRules))
	good := p.ca.Client(t, "envoy").TLS(t)
	stranger := testpki.NewCA(t, "other CA").Client(t, "stranger").TLS(t)
	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"client certificate", []tls.Certificate{good}, true},
		{"no client certificate", nil, false},
		{"certificate of another CA", []tls.Certificate{stranger}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, h2 := range []bool{false, true} {
				req, _ := http.NewRequest(http.MethodPost, n.URL+"/v2/ratelimit.limit", strings.NewReader(limitBody))
				req.Header.Set("Authorization", "Bearer mtls-key-0123456789")
				req.Header.Set("Content-Type", "application/json")
				res, err := p.httpClient(h2, tc.certs...).Do(req)
				if err == nil {
					res.Body.Close()
				}
				if (err == nil && res.StatusCode == http.StatusOK) != tc.ok {
					t.Fatalf("h2 %v: %v, %v; want ok=%v", h2, res, err, tc.ok)
				}
			}
			c := rlsClient(t, n, p.clientConfig(tc.certs...))
			if _, err := shouldRateLimit(t, c, "edge", "remote_address", "10.9.9.9"); (err == nil) != tc.ok {
				t.Fatalf("gRPC: %v; want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestTLSReload rotates the certificate with SIGHUP: new connections get the
// new one while an established connection goes on; a broken pair is logged
// and the certificate in force stays.
func TestTLSReload(t *testing.T) {
	p := newPKI(t)
	n := startNode(t, p, nil)
	cfg := p.clientConfig()
	if got := serverName(t, n, cfg); got != "first" {
		t.Fatalf("certificate %q, want first", got)
	}
	kept := p.httpClient(false) // its keep-alive connection, opened now, outlives the reload
	liveness := func(c *http.Client) string {
		t.Helper()
		res, err := c.Get(n.URL + "/v2/liveness")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("liveness: %d", res.StatusCode)
		}
		return res.TLS.PeerCertificates[0].Subject.CommonName
	}
	liveness(kept)

	p.ca.Server(t, "second").Write(t, p.certFile, p.keyFile)
	hangup(t, n, `sluice_tls_reloads_total{result="ok"} 1`)
	if got := serverName(t, n, cfg); got != "second" {
		t.Fatalf("after the reload a new connection gets %q, want second", got)
	}
	if got := liveness(kept); got != "first" {
		t.Fatalf("the connection opened before the reload now shows %q; want it kept (first)", got)
	}

	testpki.WriteFile(t, p.keyFile, []byte("-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n"))
	hangup(t, n, `sluice_tls_reloads_total{result="error"} 1`)
	if got := serverName(t, n, cfg); got != "second" {
		t.Fatalf("after a broken pair a new connection gets %q, want second (kept)", got)
	}
	if !strings.Contains(n.logs(), "tls: reload failed; keeping the certificate in force") {
		t.Fatalf("the failed reload is not logged:\n%s", n.logs())
	}
}

// TestAdminListener checks that metrics and pprof are served only by the
// admin listener (namespace names never on the API port), with liveness and
// readiness.
func TestAdminListener(t *testing.T) {
	n := start(t, nil, "--root-key", "admin-key-0123456789:acme")
	n.limit("admin-key-0123456789", "acme-secret-project", "u", 10, window, 1)
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/heap", "/healthz", "/readyz"} {
		r := n.do("GET", path, "", "", nil)
		if r.Code != 404 || strings.Contains(r.Raw, "acme-secret-project") {
			t.Errorf("API port %s: %d %.200s; want 404", path, r.Code, r.Raw)
		}
	}
	for _, tc := range []struct{ path, body string }{
		{"/metrics", `sluice_ratelimit_decisions_total{namespace="acme-secret-project",outcome="passed"} 1`},
		{"/debug/pprof/", "goroutine"},
		{"/debug/pprof/heap?debug=1", "heap profile"},
		{"/healthz", "ok"},
		{"/readyz", "ready"},
	} {
		if code, body := n.admin(tc.path); code != 200 || !strings.Contains(body, tc.body) {
			t.Errorf("admin %s: %d %.200s", tc.path, code, body)
		}
	}
	if r := n.do("GET", "/v2/liveness", "", "", nil); r.Code != 200 {
		t.Errorf("API liveness: %d", r.Code)
	}
}

// TestReadyzWaitsForOrigin starts a node whose Redis origin is unreachable:
// it is live and decides, but not ready.
func TestReadyzWaitsForOrigin(t *testing.T) {
	n := start(t, nil, "--redis-url", "redis://127.0.0.1:1", "--store", "sqlite")
	if code, body := n.admin("/readyz"); code != 503 || !strings.Contains(body, "origin") {
		t.Fatalf("readyz with the origin down: %d %q", code, body)
	}
	if code, _ := n.admin("/healthz"); code != 200 {
		t.Fatalf("healthz: %d", code)
	}
	if d := n.limit("any", "ns", "u", 10, window, 1); !d.Success {
		t.Fatalf("decision with the origin down: %+v", d)
	}
}

func TestAdminListenerOff(t *testing.T) {
	n := start(t, nil, "--admin-addr", "")
	if n.Admin != "" || !strings.Contains(n.logs(), "admin listener off") {
		t.Fatalf("admin %q:\n%s", n.Admin, n.logs())
	}
	if r := n.do("GET", "/metrics", "", "", nil); r.Code != 404 {
		t.Fatalf("API /metrics: %d", r.Code)
	}
}

// hashKey runs `sluice hash-key` with key on standard input.
func hashKey(t *testing.T, key string) string {
	t.Helper()
	cmd := exec.Command(binary, "hash-key")
	cmd.Stdin = strings.NewReader(key + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sluice hash-key: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestHashedRootKey starts servers that know only the SHA-256 of their root
// key (by flag, environment and file): the key is accepted, other tokens and
// the hash itself are refused, the refusals are counted, and no presented
// key appears in a log line or a metric.
func TestHashedRootKey(t *testing.T) {
	const key = "e2e-secret-key-7f3a"
	hash := hashKey(t, key)
	if sum := sha256.Sum256([]byte(key)); hash != hex.EncodeToString(sum[:]) {
		t.Fatalf("sluice hash-key printed %q, want the SHA-256 of the key", hash)
	}
	other := hashKey(t, "e2e-other-key-0123") // a second workspace's
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flag", nil, []string{"--root-key-sha256", hash + ":acme"}},
		{"environment", []string{"SLUICE_ROOT_KEY_SHA256S=" + other + ":globex," + hash + ":acme"}, nil},
		{"file", nil, []string{"--config", writeFile(t, "c.yaml", "root-key-sha256: [\""+hash+":acme\"]\n")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := start(t, tc.env, tc.args...)
			if d := n.limit(key, "hashed", "u", 10, window, 1); !d.Success {
				t.Fatalf("the key: %+v", d)
			}
			for _, bad := range []string{"e2e-wrong-key-1", "e2e-wrong-key-2", hash} {
				if r := n.call(bad, "limit", map[string]any{"namespace": "hashed", "identifier": "u", "limit": 10, "duration": window}); r.Code != 401 {
					t.Fatalf("token %q: %d", bad, r.Code)
				}
			}
			if r := n.call("", "limit", map[string]any{"namespace": "hashed", "identifier": "u", "limit": 10, "duration": window}); r.Code != 401 {
				t.Fatalf("no token: %d", r.Code)
			}
			m := n.metrics()
			for _, want := range []string{`sluice_auth_failures_total{reason="unknown_key"} 3`, `sluice_auth_failures_total{reason="missing"} 1`} {
				if !strings.Contains(m, want) {
					t.Errorf("metrics lack %s: %s", want, grepLines(m, "auth_failures"))
				}
			}
			logs := n.logs()
			if !strings.Contains(logs, "authentication failed") {
				t.Errorf("no failed authentication logged:\n%s", logs)
			}
			for _, secret := range []string{key, "e2e-wrong-key", hash} {
				for _, out := range []struct{ name, text string }{{"log", logs}, {"metrics", m}} {
					if strings.Contains(out.text, secret) {
						t.Errorf("the %s holds the presented key %q:\n%s", out.name, secret, lineWith(out.text, secret))
					}
				}
			}
		})
	}
}

// lineWith returns the first line of s that contains sub.
func lineWith(s, sub string) string {
	sc := bufio.NewScanner(bytes.NewReader([]byte(s)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), sub) {
			return sc.Text()
		}
	}
	return ""
}

// TestHangupWithoutReloads sends SIGHUP to a server with nothing to reload:
// it logs so and goes on serving.
func TestHangupWithoutReloads(t *testing.T) {
	n := start(t, nil)
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(n.logs(), "SIGHUP: nothing to reload") {
		if time.Now().After(deadline) {
			t.Fatalf("no log line after SIGHUP:\n%s", n.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := n.do("GET", "/v2/liveness", "", "", nil); r.Code != http.StatusOK {
		t.Fatalf("after SIGHUP: %d", r.Code)
	}
}
