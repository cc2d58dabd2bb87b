// Package servetest runs the real sluice binary for the tests of the
// packages that talk to it over HTTP (client, httplimit): it builds
// cmd/sluice once per test binary and starts `sluice serve` on free
// loopback ports, each with its own data folder.
package servetest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Main is the TestMain of a package whose tests share one server: it
// builds sluice, starts `sluice serve` with args, hands the executable and
// the server to ready, runs the tests under goleak (ignoring the server's
// log readers) and stops the server. It never returns.
func Main(m *testing.M, args []string, ready func(binary string, shared *Server)) {
	dir, bin, err := Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, err := Launch(bin, dir, args...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	ready(bin, shared)
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(), goleak.Cleanup(func(code int) {
		shared.Stop()
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// Build compiles cmd/sluice into a new temporary folder and returns the
// folder (to remove when the tests end) and the executable's path. It
// builds with -trimpath, as make test does, so that a fresh clone of the
// same code finds its packages in the build cache.
func Build() (dir, binary string, err error) {
	dir, err = os.MkdirTemp("", "sluice-servetest-")
	if err != nil {
		return "", "", fmt.Errorf("servetest: %w", err)
	}
	binary = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-trimpath", "-o", binary, "github.com/sluicehq/sluice/cmd/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("servetest: building sluice: %w", err)
	}
	return dir, binary, nil
}

// Server is one running `sluice serve`.
type Server struct {
	// URL is the API's base URL: http://127.0.0.1:PORT, or https:// when
	// started with --tls-cert.
	URL string

	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, valid after done

	mu    sync.Mutex
	log   bytes.Buffer
	admin string // the admin listener's address, once logged
}

// Start runs `binary serve` with args on a free loopback port, the admin
// listener on another and a fresh data folder, and waits until it listens.
// The process gets SIGTERM when the test ends.
func Start(t testing.TB, binary string, args ...string) *Server {
	t.Helper()
	s, err := Launch(binary, t.TempDir(), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Launch is Start for a TestMain: it runs `binary serve` with args and its
// SQLite database in dataDir and waits until it listens. The caller stops
// it.
func Launch(binary, dataDir string, args ...string) (*Server, error) {
	full := append([]string{"serve", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--log-format", "json", "--data-dir", dataDir}, args...)
	s := &Server{cmd: exec.Command(binary, full...), done: make(chan struct{})}
	s.cmd.Env = cleanEnv()
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("servetest: %w", err)
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("servetest: %w", err)
	}
	addr := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		s.scan(stderr, addr)
	}()
	go func() {
		<-scanned // Wait closes the pipe: read it to its end first
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	select {
	case a := <-addr:
		s.URL = "http://" + a
		if hasFlag(args, "--tls-cert") {
			s.URL = "https://" + a
		}
		return s, nil
	case <-s.done:
		err := s.err
		if err == nil {
			err = errors.New("exit status 0")
		}
		return nil, fmt.Errorf("servetest: sluice exited before listening (%w):\n%s", err, s.Logs())
	case <-time.After(30 * time.Second):
		s.Stop()
		return nil, fmt.Errorf("servetest: sluice did not listen within 30s:\n%s", s.Logs())
	}
}

// scan keeps the server's log and sends the API's address on addr.
func (s *Server) scan(stderr io.Reader, addr chan<- string) {
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		s.mu.Lock()
		s.log.WriteString(line + "\n")
		s.mu.Unlock()
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "admin listening" {
			s.mu.Lock()
			s.admin = rec.Addr
			s.mu.Unlock()
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" {
			select {
			case addr <- rec.Addr:
			default:
			}
		}
	}
}

// AdminURL returns the admin listener's base URL (http://127.0.0.1:PORT),
// logged before the API listens; "" if it is off.
func (s *Server) AdminURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin == "" {
		return ""
	}
	return "http://" + s.admin
}

// Logs returns what the server has logged so far.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// Stop sends SIGTERM and waits up to 10 s, then kills the process.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
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
