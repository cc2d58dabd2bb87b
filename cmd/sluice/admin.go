package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/origin/redis"
)

// AdminFlags are the flags of the admin listener, embedded in serveCmd.
type AdminFlags struct {
	AdminAddr string `name:"admin-addr" default:"127.0.0.1:7071" help:"Address of the admin listener: the console at /, /metrics, /debug/pprof/, /healthz, /readyz, without authentication (keep it private: the console edits every workspace's overrides). Port 0 picks a free port (logged); empty turns it off."`
}

// validate checks --admin-addr.
func (f *AdminFlags) validate() error {
	if f.AdminAddr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(f.AdminAddr); err != nil {
		return fmt.Errorf("--admin-addr %q: %w", f.AdminAddr, err)
	}
	return nil
}

// readiness is what /readyz reports: ready once the API listens and every
// dependency awaited (the origin) has been reached since start, until
// shutdown begins. The store needs no wait: a store unreachable at start
// stops the start.
type readiness struct {
	mu        sync.Mutex
	listening bool
	stopping  bool
	waiting   []string // dependencies not reached yet
}

// await registers the dependency name as not reached yet; call the returned
// function once it is.
func (r *readiness) await(name string) (reached func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waiting = append(r.waiting, name)
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, w := range r.waiting {
			if w == name {
				r.waiting = append(r.waiting[:i], r.waiting[i+1:]...)
				break
			}
		}
	}
}

// listen records that the API accepts connections.
func (r *readiness) listen() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listening = true
}

// stop records that shutdown began: no longer ready.
func (r *readiness) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping = true
}

// status reports whether the server is ready and, if not, why.
func (r *readiness) status() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stopping:
		return false, "shutting down"
	case !r.listening:
		return false, "starting"
	case len(r.waiting) > 0:
		return false, "not reached since start: " + strings.Join(r.waiting, ", ")
	}
	return true, "ready"
}

// Pace at which an unreachable dependency is tried again for readiness: the
// wait doubles from probeInterval up to maxProbeInterval, which also bounds
// the log lines of a client library that logs each failure.
const (
	probeInterval    = time.Second
	maxProbeInterval = 30 * time.Second
)

// probe awaits the dependency name: in the background, it tries ping at
// once, then again after growing waits until it succeeds or ctx ends, and
// then calls release.
func (r *readiness) probe(ctx context.Context, name string, ping func(context.Context) error, release func(), log *slog.Logger) {
	reached := r.await(name)
	try := func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return ping(pctx) == nil
	}
	go func() {
		defer release()
		if try() {
			reached()
			return
		}
		log.Warn("not reachable at start; /readyz answers 503 until it is (decisions go on meanwhile)", "dependency", name)
		for wait := probeInterval; ; wait = min(2*wait, maxProbeInterval) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			if try() {
				reached()
				log.Info("reachable: ready", "dependency", name)
				return
			}
		}
	}()
}

// originPing returns the readiness check of the regional origin of kind and
// the release of what it holds, or a nil check when the origin is the
// limiter's memory origin. It pings over a Redis client of its own.
func (c *serveCmd) originPing(kind string) (ping func(context.Context) error, release func()) {
	if kind != "redis" {
		return nil, nil
	}
	client, err := redis.NewClient(c.RedisURL)
	if err != nil { // Validate checked the URL; the origin would have failed first
		return func(context.Context) error { return err }, func() {}
	}
	return func(ctx context.Context) error { return client.Ping(ctx).Err() }, func() { _ = client.Close() }
}

// startAdmin serves the admin listener on --admin-addr: /metrics (gather),
// Go's /debug/pprof/ (without cmdline), /healthz (the process is live) and /readyz (ready, see
// [readiness]). It logs "admin listening" with the address. Its close is
// registered in cl; readiness turns false as soon as ctx ends.
func (c *serveCmd) startAdmin(ctx context.Context, gather prometheus.Gatherer, console *lateHandler, log *slog.Logger, cl *cleanup) (*readiness, error) {
	ready := &readiness{}
	context.AfterFunc(ctx, ready.stop)
	if c.AdminAddr == "" {
		log.Info("admin listener off (--admin-addr is empty): no /metrics, /debug/pprof/, /healthz, /readyz")
		return ready, nil
	}
	ln, err := net.Listen("tcp", c.AdminAddr)
	if err != nil {
		return nil, fmt.Errorf("--admin-addr: listen on %s: %w", c.AdminAddr, err)
	}
	srv := &http.Server{
		Handler:           adminHandler(gather, ready, console),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener stopped", "err", err)
		}
	}()
	cl.add(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close() // a CPU profile in progress
		}
		<-done
	})
	log.Info("admin listening", "addr", ln.Addr().String())
	if !isLoopback(c.AdminAddr) {
		log.Warn("the admin listener is not on a loopback address: /metrics (namespace names, traffic) and /debug/pprof/ answer anyone who reaches it, without authentication", "addr", c.AdminAddr)
	}
	return ready, nil
}

// noCmdline answers /debug/pprof/cmdline, which net/http/pprof would
// answer with the process's arguments: they may hold secrets (a root key, the
// cluster secret, a DSN's password), so it is not served.
func noCmdline(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "not served: the command line may hold secrets", http.StatusNotFound)
}

// lateHandler is a handler set once start-up has built it: the console,
// which needs the API. Until then it answers 503.
type lateHandler struct{ h atomic.Pointer[http.Handler] }

// set makes h the handler.
func (l *lateHandler) set(h http.Handler) { l.h.Store(&h) }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := l.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	http.Error(w, "starting", http.StatusServiceUnavailable)
}

// adminHandler routes the admin listener: Go's /debug/pprof/ but for
// cmdline (see noCmdline), and the console (with its JSON endpoints under
// /api/) at every other path.
func adminHandler(gather prometheus.Gatherer, ready *readiness, console http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", console)
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/debug/pprof/"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) { // the methods below have their own patterns
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		})
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", noCmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := ready.status()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(why + "\n"))
	})
	return mux
}
