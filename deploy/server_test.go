package deploy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
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

// binary is the sluice executable that TestMain builds.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", binary, "github.com/sluicehq/sluice/cmd/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "deploy: building sluice:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one running `sluice serve`.
type proc struct {
	cmd   *exec.Cmd
	admin string // http://127.0.0.1:PORT of the admin listener
	done  chan struct{}
	logs  *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startSluice runs the binary with args (which start with "serve") and env
// (no SLUICE_* variable of the test's own environment is passed), and stops
// it with SIGTERM at cleanup. adminPort is the port of its --admin-addr on
// 127.0.0.1.
func startSluice(t *testing.T, adminPort int, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), done: make(chan struct{}), logs: &syncBuffer{},
		admin: "http://127.0.0.1:" + strconv.Itoa(adminPort)}
	p.cmd.Env = append(cleanEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("sluice %s logged (last lines):\n%s", strings.Join(args, " "), lastLines(p.logs.String(), 30))
		}
	})
	return p
}

// waitStatus polls GET path on the admin listener until it answers want,
// for up to timeout; it fails t if the process exits or time runs out.
func (p *proc) waitStatus(t *testing.T, path string, want int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		code, body, err := get(p.admin + path)
		if err == nil && code == want {
			return
		}
		last = fmt.Sprintf("%d %q %v", code, body, err)
		select {
		case <-p.done:
			t.Fatalf("sluice exited before GET %s answered %d (last: %s):\n%s", path, want, last, p.logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s did not answer %d within %v (last: %s)", path, want, timeout, last)
		}
	}
}

// metrics returns the admin listener's /metrics.
func (p *proc) metrics(t *testing.T) string {
	t.Helper()
	code, body, err := get(p.admin + "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	return body
}

// waitMetric polls /metrics until cond holds on the parsed exposition, for
// up to timeout, while poke (if not nil) runs between polls to make it
// happen.
func (p *proc) waitMetric(t *testing.T, what string, timeout time.Duration, poke func(), cond func(body string, exp exposition) bool) exposition {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		body := p.metrics(t)
		exp, err := parseExposition(body)
		if err != nil {
			t.Fatal(err)
		}
		if cond(body, exp) {
			return exp
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen in /metrics within %v", what, timeout)
		}
		if poke != nil {
			poke()
		}
		time.Sleep(50 * time.Millisecond) // polling pace, not synchronization
	}
}

func get(url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
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

// freePort returns a loopback port free for TCP and UDP (the gossip uses
// both) at the time of the call.
func freePort(t *testing.T) int {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		_ = ln.Close()
		if err != nil {
			continue
		}
		_ = pc.Close()
		return port
	}
	t.Fatal("no free port for TCP and UDP")
	return 0
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
