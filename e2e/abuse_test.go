package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// maxErrorBody is server.MaxErrorBodyBytes: no error body is larger.
const maxErrorBody = 8 << 10

// vmRSS returns the resident memory of process pid, in bytes, from
// /proc/PID/status.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// hostileBodies are request bodies of about 1 MiB (the body cap) built to
// make error bodies large, by endpoint.
func hostileBodies() []struct{ endpoint, body string } {
	fields := func(n int, name func(i int) string) string {
		var b strings.Builder
		b.WriteString(`{"namespace":"n","identifier":"i","limit":1,"duration":60000`)
		for i := range n {
			b.WriteString(`,"` + name(i) + `":1`)
		}
		return b.String() + "}"
	}
	return []struct{ endpoint, body string }{
		{"limit", fields(170_000, func(int) string { return "x" })},                                // ~170k unknown fields
		{"limit", fields(80_000, strconv.Itoa)},                                                    // distinct names
		{"setOverride", fields(1, func(int) string { return strings.Repeat("n", 1000_000) })},      // one huge name
		{"limit", fields(700, func(i int) string { return strings.Repeat(`\u0001`, 200) + "x" })},  // unprintable names
		{"multiLimit", "[" + strings.TrimSuffix(strings.Repeat("{},", 300_000), ",") + "]"},        // many elements
		{"listOverrides", `{"x":` + strings.Repeat("[", 9_990) + strings.Repeat("]", 9_990) + `}`}, // deep nesting
		{"getOverride", `{"x":` + strings.Repeat("[", 20_000) + strings.Repeat("]", 20_000) + `}`}, // too deep
		{"limit", fields(100_000, func(int) string { return "limit" })},                            // duplicates
	}
}

// TestHostileBodiesBounded sends 16 hostile bodies at once, twice, to a
// real server: every answer is a 400 of at most 8 KiB and the server's RSS
// grows by less than 100 MB (on the code before the bound, 16 such bodies
// took it from 29 MB to 2.36 GB).
func TestHostileBodiesBounded(t *testing.T) {
	n := start(t, nil, "--root-key", rk+":acme")
	pid := n.cmd.Process.Pid
	n.limit(rk, "warm", "u", 10, window, 1)
	before := vmRSS(t, pid)
	bodies := hostileBodies()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: loadTransport(16)}
	defer hc.CloseIdleConnections()
	var peak int64
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := range 16 {
			b := bodies[(i+round)%len(bodies)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- hostileCall(hc, n.URL, b.endpoint, b.body)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		peak = max(peak, vmRSS(t, pid))
	}
	growth := peak - before
	t.Logf("VmRSS %.1f MB before, %.1f MB at most after 2 rounds of 16 hostile bodies (+%.1f MB)", float64(before)/1e6, float64(peak)/1e6, float64(growth)/1e6)
	if growth > 100e6 {
		t.Fatalf("RSS grew by %.1f MB, over the 100 MB bound", float64(growth)/1e6)
	}
}

// hostileCall posts body to endpoint and checks that the answer is a 400
// with Unkey's error body, at most maxErrorBody long.
func hostileCall(hc *http.Client, base, endpoint, body string) error {
	req, err := http.NewRequest(http.MethodPost, base+"/v2/ratelimit."+endpoint, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+rk)
	req.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", endpoint, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	switch {
	case err != nil:
		return fmt.Errorf("%s: reading the answer: %w", endpoint, err)
	case res.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), `"requestId"`) || !strings.Contains(string(raw), "invalid_input"):
		return fmt.Errorf("%s: %d %.300s; want a 400 with Unkey's error body", endpoint, res.StatusCode, raw)
	case len(raw) > maxErrorBody:
		return fmt.Errorf("%s: a %d-byte answer, over %d bytes", endpoint, len(raw), maxErrorBody)
	}
	return nil
}

// TestMaxConnsOverTCP starts a server with --max-conns 5 and opens 10
// keep-alive connections: 5 are served, 5 closed at accept and counted in
// sluice_http_connections_rejected_total.
func TestMaxConnsOverTCP(t *testing.T) {
	const maxConns = 5
	n := start(t, nil, "--max-conns", strconv.Itoa(maxConns))
	served := 0
	for range maxConns + 5 {
		conn, err := net.DialTimeout("tcp", n.hostPort(), 5*time.Second)
		if err != nil { // the reset of a refused connection can come before connect returns
			continue
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, "GET /v2/liveness HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			continue
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			continue
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			served++
		}
	}
	if served != maxConns {
		t.Fatalf("%d connections served, want %d", served, maxConns)
	}
	if m := n.metrics(); !strings.Contains(m, "sluice_http_connections_rejected_total 5\n") || !strings.Contains(m, "sluice_http_connections_open 5\n") {
		t.Fatalf("connection metrics:\n%s", grepLines(m, "sluice_http_connections"))
	}
}

// TestSecretsOutOfArgv starts a cluster node whose root keys and cluster
// secret come from files: neither is in its command line (/proc/PID/cmdline)
// nor answered by /debug/pprof/cmdline, the keys work, and no warning is
// logged; a node given a root key as a flag warns about it.
func TestSecretsOutOfArgv(t *testing.T) {
	const key, secret = "file-root-key-0123456789", "file-cluster-secret-0123456789-abcdef"
	dir := t.TempDir()
	keys, secretFile := filepath.Join(dir, "keys"), filepath.Join(dir, "secret")
	if err := os.WriteFile(keys, []byte("# acme's key\n"+key+":acme\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gossip := "127.0.0.1:" + strconv.Itoa(gossipPorts(t, 1)[0])
	n := start(t, nil, "--root-key-file", keys, "--origin", "cluster", "--cluster-addr", gossip, "--cluster-secret-file", secretFile)
	if d := n.limit(key, "ns", "u", 10, window, 1); !d.Success {
		t.Fatalf("the key from the file: %+v", d)
	}
	if r := n.call("another-key-0123456789", "limit", `{"namespace":"ns","identifier":"u","limit":1,"duration":60000}`); r.Code != 401 {
		t.Fatalf("an unknown key: %d", r.Code)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n.cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	code, body := n.admin("/debug/pprof/cmdline")
	for what, s := range map[string]string{"/proc/PID/cmdline": string(cmdline), "/debug/pprof/cmdline": body, "the log": n.logs()} {
		if strings.Contains(s, key) || strings.Contains(s, secret) {
			t.Errorf("%s holds a secret: %q", what, s)
		}
	}
	if code != http.StatusNotFound {
		t.Errorf("/debug/pprof/cmdline: %d %q; want 404", code, body)
	}
	if strings.Contains(n.logs(), "a secret is given on the command line") || !strings.Contains(n.logs(), `"encrypted":true`) {
		t.Errorf("log of the node configured by files:\n%s", n.logs())
	}
	flagged := start(t, nil, "--root-key", key+":acme")
	if !strings.Contains(flagged.logs(), `"msg":"a secret is given on the command line`) || !strings.Contains(flagged.logs(), `"flag":"--root-key"`) {
		t.Errorf("no warning for --root-key:\n%s", flagged.logs())
	}
}
