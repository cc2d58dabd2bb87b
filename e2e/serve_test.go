package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestGracefulShutdown starts a request whose body is still being sent,
// sends SIGTERM, then finishes the body: the request must complete with
// 200 and the process must exit 0 after logging its shutdown steps.
func TestGracefulShutdown(t *testing.T) {
	n := start(t, nil)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, n.URL+"/v2/ratelimit.limit", pr)
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	done := make(chan result, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		done <- result{code: res.StatusCode, body: string(b)}
	}()
	if _, err := pw.Write([]byte(`{"namespace":"drain","identifier":"u",`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the request is in flight
	if err := n.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := pw.Write([]byte(`"limit":1,"duration":60000}`)); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	r := <-done
	if r.err != nil || r.code != 200 || !strings.Contains(r.body, `"success":true`) {
		t.Fatalf("in-flight request was not drained: %+v", r)
	}
	select {
	case <-n.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("process did not exit:\n%s", n.logs())
	}
	if n.err != nil {
		t.Fatalf("exit: %v\n%s", n.err, n.logs())
	}
	logs := n.logs()
	for _, want := range []string{"shutting down", `"msg":"stopped"`} {
		if !strings.Contains(logs, want) {
			t.Fatalf("log lacks %q:\n%s", want, logs)
		}
	}
	// New connections are refused after shutdown.
	if _, err := http.Get(n.URL + "/v2/liveness"); err == nil {
		t.Fatal("server still accepts connections after shutdown")
	}
}

// TestShutdownCutsRequestsBeforeTheFinalFlush sends a multiLimit of three
// cold counters while the Redis origin answers nothing, so that the handler
// waits on the origin (up to the origin timeout, 250 ms, per counter), and
// sends SIGTERM with --shutdown-timeout 1ms: the drain times out with the
// request running, the cut ends its context, and the limiter decides the
// rest locally at once. The answer must reach the client (200, all three
// admitted), and the limiter's final flush, which runs only once every
// handler has returned, must bring the three admitted units to Redis: a
// node started afterwards sees them. Closing the connections instead (as
// shutdown did before the cut) loses the answer.
func TestShutdownCutsRequestsBeforeTheFinalFlush(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	proxy := testenv.NewProxy(t, redisAddr)
	ws := fmt.Sprintf("e2e-cut-%d", time.Now().UnixNano())
	common := []string{"--store", "sqlite", "--root-key", rk + ":" + ws}
	a := start(t, nil, append(common, "--redis-url", "redis://"+proxy.Addr()+"/0", "--shutdown-timeout", "1ms")...)
	slow := proxy.Latency(time.Minute) // Redis answers nothing from now on
	ids := []string{"x", "y", "z"}
	var checks []string
	for _, id := range ids {
		checks = append(checks, fmt.Sprintf(`{"namespace":"cut","identifier":%q,"limit":10,"duration":%d}`, id, window))
	}
	answer := post(t, a.URL+"/v2/ratelimit.multiLimit", rk, "["+strings.Join(checks, ",")+"]")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(a.metrics(), "\nsluice_http_requests_in_flight 1\n") {
		if time.Now().After(deadline) {
			t.Fatalf("the request is not in flight after 5s:\n%s", a.logs())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-answer
	slow() // Redis answers again, for the final flush
	if r.err != nil || r.code != http.StatusOK || strings.Count(r.body, `"passed":true`) != len(ids)+1 {
		t.Fatalf("the cut request got no decision: status %d, body %q, error %v\n%s", r.code, r.body, r.err, a.logs())
	}
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("process did not exit:\n%s", a.logs())
	}
	logs := a.logs()
	if a.err != nil {
		t.Fatalf("exit: %v\n%s", a.err, logs)
	}
	last := -1
	for _, step := range []string{"drain timed out; cutting", "every request handler returned", `"msg":"stopped"`} {
		i := strings.Index(logs, step)
		if i <= last {
			t.Fatalf("log lacks %q after the previous step:\n%s", step, logs)
		}
		last = i
	}
	for _, not := range []string{"still running after the cut", "closing the limiter"} {
		if strings.Contains(logs, not) {
			t.Fatalf("log has %q:\n%s", not, logs)
		}
	}
	b := start(t, nil, append(common, "--redis-url", "redis://"+redisAddr+"/0")...)
	for _, id := range ids {
		if d := b.limit(rk, "cut", id, 10, window, 0); d.Remaining != 9 {
			t.Errorf("counter %s: remaining %d on a new node, want 9 (the cut request's unit did not reach Redis)", id, d.Remaining)
		}
	}
}

// result is what a request sent by post got.
type result struct {
	code int
	body string
	err  error
}

// post sends body to url with root key key in the background.
func post(t *testing.T, url, key, body string) <-chan result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	out := make(chan result, 1)
	go func() {
		defer cancel()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- result{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		out <- result{code: res.StatusCode, body: string(b), err: err}
	}()
	return out
}

// run executes the binary to completion and returns its exit code and
// output.
func run(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(append(cleanEnv(), "SLUICE_ADMIN_ADDR=127.0.0.1:0"), env...) // not the default port, which another process may hold
	out, err := cmd.CombinedOutput()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

func TestStartupRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no key on a public address", nil, []string{"serve", "--http-addr", "0.0.0.0:0"}, "not a loopback address"},
		{"malformed root key", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--root-key", "nocolon"}, "root key"},
		{"malformed env root keys", []string{"SLUICE_ROOT_KEYS=a:b,broken"}, []string{"serve", "--http-addr", "127.0.0.1:0"}, "root key"},
		{"root key of one character", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--root-key", "k:acme"}, "a root key must be at least 16 bytes"},
		{"root key of 15 bytes in the environment", []string{"SLUICE_ROOT_KEYS=0123456789abcde:acme"}, []string{"serve", "--http-addr", "127.0.0.1:0"}, "at least 16 bytes"},
		{"short root key in a file", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--root-key-file", writeFile(t, "keys", "# keys\nshort:acme\n")}, "line 2"},
		{"missing root key file", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--root-key-file", "/nonexistent/keys"}, "--root-key-file"},
		{"cluster secret of 31 bytes", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--origin", "cluster", "--cluster-addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--cluster-secret", strings.Repeat("s", 31)}, "at least 32 bytes"},
		{"max conns zero", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--max-conns", "0"}, "--max-conns"},
		{"bad redis url", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--redis-url", "http://x"}, "--redis-url"},
		{"origin redis without url", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--origin", "redis"}, "needs --redis-url"},
		{"cluster origin on a public address without a secret", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--origin", "cluster", "--cluster-addr", "0.0.0.0:0", "--data-dir", t.TempDir()}, "--cluster-secret"},
		{"unknown log format", nil, []string{"serve", "--log-format", "xml"}, "log-format"},
		{"rls config missing", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--rls-config", "/nonexistent/rls.yaml"}, "--rls-config"},
		{"rls config invalid", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--rls-config", writeFile(t, "bad.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")}, "bad.yaml"},
		{"unknown config key", nil, []string{"--config", writeFile(t, "c.yaml", "http-adr: 1\n"), "serve"}, "unknown keys: http-adr"},
		{"tls cert without key", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key"},
		{"tls files missing", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"}, "--tls-cert/--tls-key"},
		{"plaintext key given as its hash", nil, []string{"serve", "--http-addr", "127.0.0.1:0", "--root-key-sha256", "secret:acme"}, "--root-key-sha256"},
		{"malformed env hashed keys", []string{"SLUICE_ROOT_KEY_SHA256S=abc:acme"}, []string{"serve", "--http-addr", "127.0.0.1:0"}, "64 hex digits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := run(t, tc.env, tc.args...)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output lacks %q:\n%s", code, tc.want, out)
			}
		})
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVersion(t *testing.T) {
	code, out := run(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "sluice ") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

// TestConfigurationSources sets root keys through the environment and the
// YAML file, and checks that a flag beats the environment.
func TestConfigurationSources(t *testing.T) {
	t.Run("env", func(t *testing.T) {
		n := start(t, []string{"SLUICE_ROOT_KEYS=env-key-1-0123456789:acme,env-key-2-0123456789:globex", "SLUICE_REGION=eu"})
		for _, k := range []string{"env-key-1-0123456789", "env-key-2-0123456789"} {
			n.limit(k, "ns", "u", 1, window, 1)
		}
		if r := n.call("k3", "limit", `{"namespace":"ns","identifier":"u","limit":1,"duration":60000}`); r.Code != 401 {
			t.Fatalf("unknown key: %d", r.Code)
		}
		if !strings.Contains(n.logs(), `"region":"eu"`) {
			t.Fatalf("SLUICE_REGION ignored:\n%s", n.logs())
		}
	})
	t.Run("yaml file", func(t *testing.T) {
		cfg := writeFile(t, "sluice.yaml", "root-key:\n  - \"file-key-0123456789:acme\"\nregion: ap\noverride_refresh: 500ms\n")
		n := start(t, nil, "--config", cfg)
		n.limit("file-key-0123456789", "ns", "u", 1, window, 1)
		if !strings.Contains(n.logs(), `"region":"ap"`) {
			t.Fatalf("region from file ignored:\n%s", n.logs())
		}
	})
	t.Run("env beats file", func(t *testing.T) {
		cfg := writeFile(t, "sluice.yaml", "region: file-region\n")
		n := start(t, []string{"SLUICE_REGION=env-region"}, "--config", cfg)
		if !strings.Contains(n.logs(), `"region":"env-region"`) {
			t.Fatalf("env did not win over the file:\n%s", n.logs())
		}
	})
	t.Run("flag beats env", func(t *testing.T) {
		n := start(t, []string{"SLUICE_REGION=env-region"}, "--region", "flag-region")
		if !strings.Contains(n.logs(), `"region":"flag-region"`) {
			t.Fatalf("flag did not win:\n%s", n.logs())
		}
	})
}

// TestOverridesSurviveRestart restarts a node on the same data dir.
func TestOverridesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	a := start(t, nil, "--data-dir", dir)
	id := a.setOverride("k", "persist", "vip", 42, window)
	if err := a.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	b := start(t, nil, "--data-dir", dir)
	if d := b.limit("k", "persist", "vip", 1, window, 0); d.OverrideID != id || d.Limit != 42 {
		t.Fatalf("after restart: %+v", d)
	}
}

// TestTwoNodesShareMySQL runs two nodes on the real MariaDB: an override set
// on one is applied by the other within its refresh interval. The
// workspace is unique to this run, so concurrent runs do not interfere.
func TestTwoNodesShareMySQL(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	ws := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	args := []string{"--mysql-dsn", dsn, "--root-key", "node-key-0123456789:" + ws, "--override-refresh", "200ms"}
	t.Cleanup(func() { deleteWorkspace(t, dsn, ws) })
	a := start(t, nil, args...)
	b := start(t, nil, args...)
	id := a.setOverride("node-key-0123456789", "shared", "user_*", 77, window)
	deadline := time.Now().Add(5 * time.Second)
	for {
		d := b.limit("node-key-0123456789", "shared", "user_1", 1, window, 0)
		if d.OverrideID == id && d.Limit == 77 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node b never applied node a's override: %+v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var os []overrideData
	b.call("node-key-0123456789", "listOverrides", map[string]any{"namespace": "shared"}).data(t, &os)
	if len(os) != 1 || os[0].OverrideID != id {
		t.Fatalf("node b lists %+v", os)
	}
}

// deleteWorkspace removes this test's rows from the shared default tables
// (the tables themselves are shared and never dropped).
func deleteWorkspace(t *testing.T, dsn, ws string) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Error(err)
		return
	}
	defer db.Close()
	for _, tbl := range []string{"sluice_overrides", "sluice_namespaces"} {
		if _, err := db.Exec("DELETE FROM "+tbl+" WHERE workspace = ?", ws); err != nil {
			t.Errorf("cleanup %s: %v", tbl, err)
		}
	}
}

// TestGCPercent checks that the server sets its GC target to 200 unless the
// environment sets GOGC: in the runtime (go_gc_gogc_percent) and in its
// startup log.
func TestGCPercent(t *testing.T) {
	for _, tc := range []struct{ name, env, log, metric string }{
		{"default", "GOGC=", `"gogc":"200"`, "go_gc_gogc_percent 200\n"},
		{"environment wins", "GOGC=50", `"gogc":"50"`, "go_gc_gogc_percent 50\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := start(t, []string{tc.env})
			if !strings.Contains(n.logs(), tc.log) {
				t.Errorf("startup log lacks %s:\n%s", tc.log, n.logs())
			}
			if m := n.metrics(); !strings.Contains(m, tc.metric) {
				t.Errorf("metrics lack %q", tc.metric)
			}
		})
	}
}
