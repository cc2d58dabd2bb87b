package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is a toxiproxy TCP proxy running inside the test process, in front of
// a real server, for injecting latency, outages and connection resets.
type Proxy struct {
	t testing.TB
	p *toxiproxy.Proxy
}

// NewProxy starts a proxy on a free loopback port in front of upstream. It is
// stopped when the test ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, t.Name(), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("testenv: start toxiproxy: %v", err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{t: t, p: p}
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.p.Listen }

// Latency delays every response by d until the returned function is called.
func (p *Proxy) Latency(d time.Duration) (remove func()) {
	return p.toxic("latency", fmt.Sprintf(`{"type":"latency","attributes":{"latency":%d}}`, d.Milliseconds()))
}

// ResetPeer makes every connection be reset (TCP RST) until the returned
// function is called.
func (p *Proxy) ResetPeer() (remove func()) {
	return p.toxic("reset", `{"type":"reset_peer","attributes":{"timeout":0}}`)
}

func (p *Proxy) toxic(name, spec string) func() {
	p.t.Helper()
	spec = `{"name":"` + name + `",` + spec[1:]
	if _, err := p.p.Toxics.AddToxicJson(bytes.NewReader([]byte(spec))); err != nil {
		p.t.Fatalf("testenv: add toxic %s: %v", name, err)
	}
	return func() { _ = p.p.Toxics.RemoveToxic(context.Background(), name) }
}

// Down closes the proxy's listener and every connection through it: the
// server looks unreachable.
func (p *Proxy) Down() { p.p.Stop() }

// Up listens again on the same address.
func (p *Proxy) Up() {
	p.t.Helper()
	if err := p.p.Start(); err != nil {
		p.t.Fatalf("testenv: restart toxiproxy: %v", err)
	}
}

// RedisServer is a redis-server process of the test's own, for tests that
// restart Redis (which would disturb the shared server).
type RedisServer struct {
	t    testing.TB
	Addr string
	dir  string // the server's files, removed after it stops
	cmd  *exec.Cmd
}

// StartRedis starts a disposable redis-server without persistence on a free
// loopback port. It is stopped when the test ends.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("testenv: redis-server is not installed; run `scripts/services.sh` or `sudo apt-get install -y redis-server`")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	s := &RedisServer{t: t, Addr: addr, dir: t.TempDir()}
	t.Cleanup(s.Stop) // after TempDir's: cleanups run last first, so the server stops before its directory goes
	s.Start()
	return s
}

// Start starts the server (again), empty, and waits until it accepts
// connections.
func (s *RedisServer) Start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	s.cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port,
		"--save", "", "--appendonly", "no", "--dir", s.dir)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("testenv: start redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			_ = conn.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("testenv: redis-server on %s did not start: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Signal sends sig to the running server: SIGSTOP freezes it (connections
// are accepted by the kernel, nothing answers), SIGCONT thaws it.
func (s *RedisServer) Signal(sig os.Signal) {
	s.t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		s.t.Fatalf("testenv: signal %v: redis-server on %s is not running", sig, s.Addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("testenv: signal %v to redis-server on %s: %v", sig, s.Addr, err)
	}
}

// Stop kills the server (SIGKILL, which also ends a stopped one); its data
// is lost, as in a crash.
func (s *RedisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}
