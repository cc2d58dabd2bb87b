package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// cutGrace is how long shutdown waits, once --shutdown-timeout has passed
// and the requests still running have been cut, for their answers to be
// written and their handlers to return. A cut request decides at once (the
// limiter stops waiting on the origin and decides locally), so this is
// ample; a handler still running after it might admit after the limiter's
// final flush, which is logged as an error.
const cutGrace = time.Second

// requests tracks the running handlers of the API listener and gives every
// request a context, the server's BaseContext, that shutdown cancels to cut
// the requests the drain left running.
type requests struct {
	ctx     context.Context
	cut     context.CancelFunc
	running atomic.Int64
	idle    chan struct{} // signalled, without blocking, when running drops to 0
}

func newRequests() *requests {
	ctx, cancel := context.WithCancel(context.Background())
	return &requests{ctx: ctx, cut: cancel, idle: make(chan struct{}, 1)}
}

// base is the server's BaseContext: every request's context descends from
// it.
func (r *requests) base(net.Listener) context.Context { return r.ctx }

// track returns h counted as running while it serves a request, whatever
// the route (the API, Envoy RLS, the cluster's peer calls).
func (r *requests) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		markUsed(req.Context())
		r.begin()
		defer r.end()
		h.ServeHTTP(w, req)
	})
}

// begin counts one more handler running.
func (r *requests) begin() { r.running.Add(1) }

// end counts one handler less running, and signals idle when none is left.
func (r *requests) end() {
	if r.running.Add(-1) == 0 {
		select {
		case r.idle <- struct{}{}:
		default:
		}
	}
}

// wait waits until no handler runs or ctx ends, and returns how many still
// run.
func (r *requests) wait(ctx context.Context) int64 {
	for {
		n := r.running.Load()
		if n == 0 {
			return 0
		}
		select {
		case <-r.idle: // maybe stale: load again
		case <-ctx.Done():
			return r.running.Load()
		}
	}
}

// serveAPI serves h on ln in the background, over TLS when certs is set,
// with every handler tracked by the returned requests; each request marks
// its connection as used (see connLimiter). Serve's result is sent on the
// returned channel.
func serveAPI(h http.Handler, ln net.Listener, certs *tlsCertificates, log *slog.Logger) (*http.Server, *requests, <-chan error) {
	reqs := newRequests()
	srv := newHTTPServer(reqs.track(h), log)
	srv.BaseContext = reqs.base
	srv.ConnContext = connContext
	serve := srv.Serve
	if certs != nil {
		serve = certs.serveTLS(srv)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- serve(ln) }()
	return srv, reqs, serveErr
}

// drain shuts srv down: it stops accepting and waits up to timeout for the
// requests in flight. If some are still running then, it cuts them (see
// cut) and waits up to grace for their handlers. When drain returns, no
// handler of reqs runs any more unless one outlived the grace, which is
// logged: the closers that follow (the API, then the limiter's final flush)
// see every admission made.
func drain(srv *http.Server, reqs *requests, serveErr <-chan error, timeout, grace time.Duration, log *slog.Logger) {
	log.Info("shutting down: draining in-flight requests", "timeout", timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		cut(srv, reqs, grace, log)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("http server stopped with an error", "err", err)
	}
}

// cut ends the requests that outlived the drain: it cancels their contexts
// (a decision waiting on the origin is then made locally at once), lets
// their connections write the answers and close, closes what is left when
// grace has passed, and waits, within the same grace, for every handler to
// return.
func cut(srv *http.Server, reqs *requests, grace time.Duration, log *slog.Logger) {
	log.Warn("drain timed out; cutting the requests still running", "running", reqs.running.Load(), "grace", grace)
	reqs.cut()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if srv.Shutdown(ctx) != nil {
		_ = srv.Close()
	}
	if n := reqs.wait(ctx); n > 0 {
		log.Error("request handlers still running after the cut; what they admit from now on may miss the final flush", "running", n, "grace", grace)
		return
	}
	log.Info("cut requests answered; every request handler returned")
}
