// Package e2e builds the real sluice binary and tests it over HTTP on
// loopback: every endpoint, every error status, overrides, isolation
// between workspaces, configuration sources and graceful shutdown.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the sluice executable built once by TestMain.
var binary string

// rk is the root key of the tests that configure one (root keys are at
// least 16 bytes).
const rk = "rk-e2e-root-key-0001"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", binary, "github.com/sluicehq/sluice/cmd/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building sluice:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// node is one running sluice process.
type node struct {
	t     *testing.T
	cmd   *exec.Cmd
	URL   string       // the API: https:// when started with --tls-cert
	Admin string       // the admin listener, http://…; "" when it is off
	HTTP  *http.Client // the client of do; default client (set it for TLS)
	done  chan struct{}
	err   error // Wait's result, valid after done

	mu  sync.Mutex
	log bytes.Buffer
}

// loadTransport is the transport of a load generator: up to perHost idle
// connections to each server, each closed after 5 s idle, before the
// server's 10 s bound on a connection that starts no request. A connection
// dialled for a request that another one served, then picked as the server
// closes it, would fail its request with a reset, which a POST is not
// retried on.
func loadTransport(perHost int) *http.Transport {
	return &http.Transport{MaxIdleConnsPerHost: perHost, IdleConnTimeout: 5 * time.Second}
}

// start runs `sluice serve` on a free loopback port, with its admin
// listener on another, and a fresh data dir (unless args set them) and
// waits until it listens. The process gets SIGTERM at cleanup.
func start(t *testing.T, env []string, args ...string) *node {
	t.Helper()
	full := []string{"serve", "--http-addr", "127.0.0.1:0", "--log-format", "json"}
	if !hasFlag(args, "--data-dir") {
		full = append(full, "--data-dir", t.TempDir())
	}
	if !hasFlag(args, "--admin-addr") {
		full = append(full, "--admin-addr", "127.0.0.1:0")
	}
	full = append(full, args...)
	n := &node{t: t, cmd: exec.Command(binary, full...), done: make(chan struct{})}
	n.cmd.Env = append(cleanEnv(), env...)
	stderr, err := n.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	var admin string // set before addr is sent
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			n.mu.Lock()
			n.log.WriteString(line + "\n")
			n.mu.Unlock()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil {
				switch rec.Msg {
				case "admin listening":
					admin = "http://" + rec.Addr
				case "listening":
					addr <- rec.Addr
				}
			}
		}
	}()
	// Wait closes the pipe: it runs once the scanner has read to the end,
	// so that the last lines (the shutdown's) are in the log.
	go func() { <-scanned; n.err = n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() { n.stop(10 * time.Second) })
	select {
	case a := <-addr:
		n.URL, n.Admin = "http://"+a, admin
		if hasFlag(args, "--tls-cert") {
			n.URL = "https://" + a
		}
	case <-n.done:
		t.Fatalf("sluice exited before listening (%v):\n%s", n.err, n.logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice did not listen within 30s:\n%s", n.logs())
	}
	return n
}

func hasFlag(args []string, f string) bool {
	for _, a := range args {
		if a == f || strings.HasPrefix(a, f+"=") {
			return true
		}
	}
	return false
}

// cleanEnv is the test's environment without SLUICE_* variables.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			out = append(out, kv)
		}
	}
	return out
}

func (n *node) logs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.String()
}

// stop sends SIGTERM and waits up to timeout, then kills.
func (n *node) stop(timeout time.Duration) error {
	select {
	case <-n.done:
		return n.err
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
		return n.err
	case <-time.After(timeout):
		_ = n.cmd.Process.Kill()
		<-n.done
		return fmt.Errorf("did not stop within %v", timeout)
	}
}

var client = &http.Client{Timeout: 10 * time.Second}

// resp is a decoded response.
type resp struct {
	Code int
	Raw  string
	Body struct {
		Meta struct {
			RequestID string `json:"requestId"`
		} `json:"meta"`
		Data       json.RawMessage `json:"data"`
		Pagination *struct {
			Cursor  string `json:"cursor"`
			HasMore bool   `json:"hasMore"`
		} `json:"pagination"`
		Error *struct {
			Title  string `json:"title"`
			Detail string `json:"detail"`
			Status int    `json:"status"`
			Type   string `json:"type"`
			Errors []struct {
				Location string `json:"location"`
				Message  string `json:"message"`
			} `json:"errors"`
		} `json:"error"`
	}
	ContentType string
}

// call POSTs body (marshalled unless it is a string) to endpoint with key.
func (n *node) call(key, endpoint string, body any) resp {
	n.t.Helper()
	raw, ok := body.(string)
	if !ok {
		b, err := json.Marshal(body)
		if err != nil {
			n.t.Fatal(err)
		}
		raw = string(b)
	}
	return n.do(http.MethodPost, "/v2/ratelimit."+endpoint, key, "application/json", strings.NewReader(raw))
}

func (n *node) do(method, path, key, contentType string, body io.Reader) resp {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, n.URL+path, body)
	if err != nil {
		n.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	c := n.HTTP
	if c == nil {
		c = client
	}
	res, err := c.Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	r := resp{Code: res.StatusCode, Raw: string(b), ContentType: res.Header.Get("Content-Type")}
	if err := json.Unmarshal(b, &r.Body); err != nil && path != "/metrics" {
		n.t.Fatalf("%s %s: response is not JSON (%v): %q", method, path, err, b)
	}
	if path != "/metrics" && (r.Body.Meta.RequestID == "" || r.ContentType != "application/json") {
		n.t.Fatalf("%s %s: no meta.requestId or Content-Type %q: %s", method, path, r.ContentType, b)
	}
	return r
}

// data decodes the data member into v and fails unless the status is 200.
func (r resp) data(t *testing.T, v any) {
	t.Helper()
	if r.Code != http.StatusOK {
		t.Fatalf("status %d: %s", r.Code, r.Raw)
	}
	if err := json.Unmarshal(r.Body.Data, v); err != nil {
		t.Fatalf("data: %v: %s", err, r.Raw)
	}
}

// limitData is the data of a ratelimit.limit response.
type limitData struct {
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	Reset      int64  `json:"reset"`
	Success    bool   `json:"success"`
	OverrideID string `json:"overrideId"`
}

func (n *node) limit(key, ns, id string, limit, duration, cost int64) limitData {
	n.t.Helper()
	var d limitData
	n.call(key, "limit", map[string]any{"namespace": ns, "identifier": id, "limit": limit, "duration": duration, "cost": cost}).data(n.t, &d)
	return d
}

// admin GETs path on n's admin listener and returns the status and body.
func (n *node) admin(path string) (int, string) {
	n.t.Helper()
	if n.Admin == "" {
		n.t.Fatal("the admin listener is off")
	}
	res, err := client.Get(n.Admin + path)
	if err != nil {
		n.t.Fatalf("GET %s on the admin listener: %v", path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		n.t.Fatalf("GET %s on the admin listener: %v", path, err)
	}
	return res.StatusCode, string(b)
}

// metrics returns n's Prometheus metrics, from the admin listener.
func (n *node) metrics() string {
	n.t.Helper()
	code, body := n.admin("/metrics")
	if code != http.StatusOK {
		n.t.Fatalf("GET /metrics on the admin listener: %d %s", code, body)
	}
	return body
}

// limitOverHTTP sends one /v2/ratelimit.limit call (root key rk, cost 1)
// with hc, for load tests that must not stop at the first failure, and
// reports whether it passed; a transport error or a status other than 200
// is an error.
func limitOverHTTP(hc *http.Client, baseURL, namespace, identifier string, limit int, d time.Duration) (bool, error) {
	return postLimit(hc, baseURL+"/v2/ratelimit.limit", limitJSON(namespace, identifier, limit, d), "success")
}

// multiLimitOverHTTP sends ratelimit.multiLimit with two checks, the
// identifier's and one on a counter every call shares whose limit is never
// reached, and reports whether the call passed: it passes exactly when the
// identifier's check does, so the reference model is the identifier's.
func multiLimitOverHTTP(hc *http.Client, baseURL, namespace, identifier string, limit int, d time.Duration) (bool, error) {
	body := "[" + limitJSON(namespace, identifier, limit, d) + "," + limitJSON(namespace, "shared-side", 1<<30, d) + "]"
	return postLimit(hc, baseURL+"/v2/ratelimit.multiLimit", body, "passed")
}

// limitJSON is the JSON of one limit check.
func limitJSON(namespace, identifier string, limit int, d time.Duration) string {
	return `{"namespace":"` + namespace + `","identifier":"` + identifier + `","limit":` + strconv.Itoa(limit) +
		`,"duration":` + strconv.FormatInt(d.Milliseconds(), 10) + `}`
}

// postLimit posts body to url with the root key and returns the boolean
// field of the answer's data.
func postLimit(hc *http.Client, url, body, field string) (bool, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+rk)
	req.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return false, err
	}
	if res.StatusCode != http.StatusOK {
		return false, fmt.Errorf("status %d: %s", res.StatusCode, raw)
	}
	var out struct {
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return false, err
	}
	var ok bool
	err = json.Unmarshal(out.Data[field], &ok)
	return ok, err
}
