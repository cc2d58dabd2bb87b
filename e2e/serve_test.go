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
	type result struct {
		code int
		body string
		err  error
	}
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
		n := start(t, []string{"SLUICE_ROOT_KEYS=k1:acme,k2:globex", "SLUICE_REGION=eu"})
		for _, k := range []string{"k1", "k2"} {
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
		cfg := writeFile(t, "sluice.yaml", "root-key:\n  - \"file-key:acme\"\nregion: ap\noverride_refresh: 500ms\n")
		n := start(t, nil, "--config", cfg)
		n.limit("file-key", "ns", "u", 1, window, 1)
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
	args := []string{"--mysql-dsn", dsn, "--root-key", "node-key:" + ws, "--override-refresh", "200ms"}
	t.Cleanup(func() { deleteWorkspace(t, dsn, ws) })
	a := start(t, nil, args...)
	b := start(t, nil, args...)
	id := a.setOverride("node-key", "shared", "user_*", 77, window)
	deadline := time.Now().Add(5 * time.Second)
	for {
		d := b.limit("node-key", "shared", "user_1", 1, window, 0)
		if d.OverrideID == id && d.Limit == 77 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node b never applied node a's override: %+v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var os []overrideData
	b.call("node-key", "listOverrides", map[string]any{"namespace": "shared"}).data(t, &os)
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
