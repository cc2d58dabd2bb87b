// Package server is Sluice's HTTP API: Unkey's v2 rate-limit endpoints
// (ratelimit.limit, multiLimit, setOverride, getOverride, listOverrides,
// deleteOverride), Sluice's ratelimit.getAnalytics and ratelimit.report and
// multiReport (usage counted after the fact, never denied), liveness and
// Prometheus metrics, with root-key authentication that confines every key to one
// workspace.
//
// Bodies are decoded strictly (exact field names, no unknown or duplicate
// fields, no trailing data, integers within ±(2^53-1), names of 1-512 bytes
// of printable UTF-8); every response, error or not, is JSON and carries
// meta.requestId. A denial is a 200 with success:false.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// DefaultMaxBodyBytes caps a request body (1 MiB); larger bodies get a 413.
const DefaultMaxBodyBytes = 1 << 20

// ErrInvalidConfig is returned, wrapped with the reason, by
// [Config.Validate] and [New].
var ErrInvalidConfig = errors.New("server: invalid config")

// Limiter decides rate-limit requests and counts usage reported after the
// fact; *sluice.Limiter implements it.
type Limiter interface {
	Ratelimit(ctx context.Context, r sluice.Request) (sluice.Response, error)
	RatelimitMany(ctx context.Context, rs []sluice.Request) ([]sluice.Response, error)
	// Report and ReportMany count usage already spent, never denied (see
	// sluice.Limiter.Report): ratelimit.report and multiReport.
	Report(ctx context.Context, r sluice.Request) (sluice.Response, error)
	ReportMany(ctx context.Context, rs []sluice.Request) ([]sluice.Response, error)
}

// Catalog holds the namespaces and overrides of every workspace;
// *store.Cache implements it. CachedNamespace, NamespaceCount and Match are
// on the path of every limit call and must answer from memory.
type Catalog interface {
	// CachedNamespace returns workspace's namespace whose ID or name is
	// idOrName if it is in memory, without reading the store.
	CachedNamespace(workspace, idOrName string) (store.Namespace, bool)
	// NamespaceCount returns how many namespaces workspace has.
	NamespaceCount(workspace string) int
	// Namespace returns workspace's namespace whose ID or name is idOrName;
	// an error wrapping store.ErrNotFound if there is none.
	Namespace(ctx context.Context, workspace, idOrName string) (store.Namespace, error)
	// EnsureNamespace is Namespace, but creates a namespace called idOrName
	// when none has that ID or name.
	EnsureNamespace(ctx context.Context, workspace, idOrName string) (store.Namespace, error)
	// Match returns the override of the namespace that applies to
	// identifier, if any.
	Match(namespaceID, identifier string) (store.Override, bool)
	// SetOverride creates or replaces an override and returns it as stored.
	SetOverride(ctx context.Context, o store.Override) (store.Override, error)
	// DeleteOverride deletes an override; store.ErrNotFound if there is
	// none.
	DeleteOverride(ctx context.Context, workspace, namespaceID, identifier string) error
	// Store returns the durable store, for the reads that must see it
	// (getOverride, listOverrides).
	Store() store.Store
}

var _ Catalog = (*store.Cache)(nil)

// Config configures a [Server].
type Config struct {
	// Limiter makes the decisions. Required.
	Limiter Limiter
	// Catalog holds namespaces and overrides. Required.
	Catalog Catalog
	// MaxNamespaces caps the namespaces of one workspace; a call that would
	// create one more is refused with a 403. Default DefaultMaxNamespaces.
	MaxNamespaces int
	// RootKeys are the accepted bearer keys. Empty means any bearer token
	// acts in workspace OpenWorkspace ("default"); the caller must allow
	// that only on a loopback address (cmd/sluice does).
	RootKeys []RootKey
	// Logger receives request errors. Default: discard.
	Logger *slog.Logger
	// Metrics, if set, are updated on every request. Default: none.
	Metrics *Metrics
	// Gatherer, if set, is served at GET /metrics, without authentication.
	// The metrics name every workspace's namespaces: serve them on a private
	// listener instead where the API is public (cmd/sluice leaves this unset
	// and serves them on its admin listener).
	Gatherer prometheus.Gatherer
	// MaxBodyBytes caps request bodies. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Services are handlers of other protocols mounted beside the API, by
	// path: the Envoy RLS gRPC service (server/rls). They get request
	// metrics, request ids and trace spans, but keep their own errors and
	// status codes; they are not authenticated by root keys.
	Services map[string]http.Handler
	// TracerProvider, if set, receives a server span per request that
	// continues the caller's W3C trace context. Default: no tracing, at no
	// cost.
	TracerProvider trace.TracerProvider
	// Analytics, if set, records every limit and multiLimit decision (not
	// reports: they decide nothing) and answers ratelimit.getAnalytics. Default: none (getAnalytics answers
	// 404).
	Analytics Analytics
}

// Validate reports the first invalid field of c.
func (c Config) Validate() error {
	switch {
	case c.Limiter == nil:
		return fmt.Errorf("%w: Limiter is nil", ErrInvalidConfig)
	case c.Catalog == nil:
		return fmt.Errorf("%w: Catalog is nil", ErrInvalidConfig)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("%w: MaxBodyBytes is negative", ErrInvalidConfig)
	case c.MaxNamespaces < 0:
		return fmt.Errorf("%w: MaxNamespaces is negative", ErrInvalidConfig)
	}
	for path, h := range c.Services {
		switch {
		case h == nil:
			return fmt.Errorf("%w: service %q has a nil handler", ErrInvalidConfig, path)
		case !strings.HasPrefix(path, "/") || path == "/" || path == "/metrics" || strings.HasPrefix(path, "/v2/") || strings.ContainsAny(path, " {}"):
			return fmt.Errorf("%w: service path %q must be a literal path outside / , /metrics and /v2/", ErrInvalidConfig, path)
		}
	}
	for _, k := range c.RootKeys {
		if err := k.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	return nil
}

// Server serves the HTTP API. Create it with [New] and mount [Server.Handler].
type Server struct {
	cfg     Config
	keys    *keyring
	mux     *http.ServeMux
	idBase  string
	idCount atomic.Uint64
	tracing tracing

	namespaces *namespaces

	authFail *authFailures
}

// New validates cfg and builds the server.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxNamespaces == 0 {
		cfg.MaxNamespaces = DefaultMaxNamespaces
	}
	kr, err := newKeyring(cfg.RootKeys)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg.RootKeys = nil // the keyring holds their hashes; the server keeps no key
	var b [6]byte
	_, _ = rand.Read(b[:])
	s := &Server{cfg: cfg, keys: kr, mux: http.NewServeMux(), idBase: "req_" + hex.EncodeToString(b[:]), tracing: newTracing(cfg.TracerProvider)}
	s.namespaces = newNamespaces(cfg.Catalog, cfg.MaxNamespaces, cfg.Logger)
	s.authFail = newAuthFailures(cfg.Logger, cfg.Metrics)
	s.route("/v2/ratelimit.limit", s.limit)
	s.route("/v2/ratelimit.multiLimit", s.multiLimit)
	s.route("/v2/ratelimit.report", s.report)
	s.route("/v2/ratelimit.multiReport", s.multiReport)
	s.route("/v2/ratelimit.setOverride", s.setOverride)
	s.route("/v2/ratelimit.getOverride", s.getOverride)
	s.route("/v2/ratelimit.listOverrides", s.listOverrides)
	s.route("/v2/ratelimit.deleteOverride", s.deleteOverride)
	s.route("/v2/ratelimit.getAnalytics", s.getAnalytics)
	for path, h := range cfg.Services {
		s.mountService(path, h)
	}
	s.mux.Handle("/v2/liveness", s.wrap("liveness", "/v2/liveness", http.MethodGet, s.liveness))
	if cfg.Gatherer != nil {
		prom := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})
		s.mux.Handle("/metrics", s.wrap("metrics", "/metrics", http.MethodGet, func(x *exchange, r *http.Request) {
			prom.ServeHTTP(&x.statusWriter, r)
		}))
	}
	s.mux.Handle("/", s.wrap("not_found", "", "", func(x *exchange, r *http.Request) {
		s.writeError(x, newError(http.StatusNotFound, TypeRouteNotFound, "No endpoint "+echo(r.Method)+" "+echo(r.URL.Path)+"."))
	}))
	return s, nil
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Close waits for the namespace creations that calls started in the
// background (each bounded by a timeout). Call it once the HTTP server has
// stopped, before closing the catalog; it always returns nil.
func (s *Server) Close() error {
	s.namespaces.wait()
	return nil
}

// pagination is the pagination object of a list's response.
type pagination struct {
	Cursor  string `json:"cursor,omitempty"`
	HasMore bool   `json:"hasMore"`
}

// call is one authenticated API request.
type call struct {
	ctx       context.Context
	workspace string
	body      []byte
	span      trace.Span // the request's span if it is recording, else nil
	start     time.Time  // when the request arrived: the time of its analytics
	// namespaceWait is when the call stops waiting for the creation of
	// its namespaces (zero until its first wait; see namespaces.forLimit).
	namespaceWait time.Time

	// data is the JSON of the response's data, appended by the handler;
	// page is the pagination of a list.
	data []byte
	page *pagination
}

// setData sets the response's data to the JSON of v.
func (c *call) setData(v any) *apiError {
	b, err := appendMarshal(c.data[:0], v)
	if err != nil { // cannot happen with the types of this package
		return internalError(fmt.Errorf("server: encoding the response: %w", err))
	}
	c.data = b
	return nil
}

// apiHandler handles an authenticated call with a read body: it sets the
// call's data (and page), or returns the error to answer.
type apiHandler func(c *call) *apiError

// statusWriter records the status code for metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Flush sends buffered data to the client, for streaming protocols.
func (w *statusWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// status is the response's status code; 200 until one is written.
func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// exchange is the state of one request, reused through a pool: the writer
// that records the status, the request id, the call, and the buffers of the
// body and the response.
type exchange struct {
	statusWriter
	start time.Time
	id    string
	call  call
	body  []byte
	data  []byte
	out   []byte
}

// maxPooledBuffer is the largest buffer an exchange keeps for reuse.
const maxPooledBuffer = 64 << 10

var exchanges = sync.Pool{New: func() any { return new(exchange) }}

func getExchange(w http.ResponseWriter, id string) *exchange {
	x := exchanges.Get().(*exchange)
	x.ResponseWriter, x.id = w, id
	return x
}

// putExchange returns x to the pool, dropping its references and any buffer
// that grew large.
func putExchange(x *exchange) {
	x.statusWriter = statusWriter{}
	x.id, x.call, x.start = "", call{}, time.Time{}
	for _, b := range []*[]byte{&x.body, &x.data, &x.out} {
		if cap(*b) > maxPooledBuffer {
			*b = nil
		}
	}
	exchanges.Put(x)
}

func (s *Server) requestID() string {
	var buf [32]byte
	b := append(buf[:0], s.idBase...)
	return string(strconv.AppendUint(b, s.idCount.Add(1), 36))
}

// instrument gives every request a request id (X-Request-Id), request
// metrics under endpoint and a trace span named after route ("" for unrouted
// paths), then calls h.
func (s *Server) instrument(endpoint, route string, h func(x *exchange, r *http.Request)) http.Handler {
	var em *endpointMetrics
	if s.cfg.Metrics != nil {
		em = s.cfg.Metrics.endpoint(endpoint)
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		x := getExchange(rw, s.requestID())
		defer putExchange(x)
		x.start = start
		rw.Header()["X-Request-Id"] = []string{x.id}
		r, span := s.tracing.start(r, route, x.id)
		defer func() { s.tracing.end(span, x.status()) }()
		if em != nil {
			em.begin()
			defer func() { em.end(x.status(), time.Since(start)) }()
		}
		h(x, r)
	})
}

// wrap instruments an endpoint of the JSON API and adds the method check and
// panic recovery (a JSON 500). method "" accepts any method.
func (s *Server) wrap(endpoint, route, method string, h func(x *exchange, r *http.Request)) http.Handler {
	return s.instrument(endpoint, route, func(x *exchange, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				s.logPanic(x.id, endpoint, v)
				if x.code == 0 {
					s.writeError(x, internalError(nil))
				}
			}
		}()
		if method != "" && r.Method != method && (method != http.MethodGet || r.Method != http.MethodHead) {
			x.Header().Set("Allow", method)
			s.writeError(x, newError(http.StatusMethodNotAllowed, TypeMethodNotAllowed, endpoint+" accepts "+method+" only, not "+echo(r.Method)+"."))
			return
		}
		h(x, r)
	})
}

// logPanic logs a panic recovered while handling a request.
func (s *Server) logPanic(id, endpoint string, v any) {
	s.cfg.Logger.Error("server: panic while handling a request", "requestId", id, "endpoint", endpoint, "panic", fmt.Sprint(v))
}

// mountService mounts a handler that speaks its own protocol (gRPC): it is
// instrumented, but its errors and status codes are its own. A panic is
// logged and aborts the response (the client sees a reset stream), since a
// JSON body would mean nothing to a gRPC client.
func (s *Server) mountService(path string, h http.Handler) {
	endpoint := strings.Trim(path, "/")
	s.mux.Handle(path, s.instrument(endpoint, path, func(x *exchange, r *http.Request) {
		defer func() {
			if v := recover(); v != nil && v != http.ErrAbortHandler { //nolint:errorlint // sentinel identity, as net/http checks it
				s.logPanic(x.id, endpoint, v)
				panic(http.ErrAbortHandler)
			}
		}()
		h.ServeHTTP(&x.statusWriter, r)
	}))
}

// route mounts an authenticated POST endpoint with a JSON body.
func (s *Server) route(path string, h apiHandler) {
	endpoint := path[len("/v2/"):]
	s.mux.Handle(path, s.wrap(endpoint, path, http.MethodPost, func(x *exchange, r *http.Request) {
		ws, ok := s.authenticate(x, r, endpoint)
		if !ok {
			return
		}
		s.handle(x, r, endpoint, ws, h)
	}))
}

// handle serves an API call of workspace ws, authenticated by the caller:
// the content type, the body, the handler, and the answer.
func (s *Server) handle(x *exchange, r *http.Request, endpoint, ws string, h apiHandler) {
	span := s.tracing.recording(r)
	if span != nil {
		span.SetAttributes(AttrWorkspace.String(ws))
	}
	if e := checkContentType(r.Header.Get("Content-Type")); e != nil {
		s.writeError(x, e)
		return
	}
	if !s.readBody(x, r) {
		return
	}
	c := &x.call
	*c = call{ctx: r.Context(), workspace: ws, body: x.body, span: span, start: x.start, data: x.data[:0]}
	e := h(c)
	x.data = c.data
	if e != nil {
		if e.Status >= 500 {
			s.cfg.Logger.Error("server: request failed", "requestId", x.id, "endpoint", endpoint, "workspace", ws, "status", e.Status, "err", e.cause)
		}
		s.writeError(x, e)
		return
	}
	x.out = appendOK(x.out[:0], x.id, c.data, c.page)
	send(x, http.StatusOK, x.out)
}

// authenticate returns the workspace of the request's root key, or counts
// and logs the failure (without the token) and answers 401 and returns
// false.
func (s *Server) authenticate(x *exchange, r *http.Request, endpoint string) (string, bool) {
	ws, missing, ok := s.keys.authenticate(r.Header.Get("Authorization"))
	if ok {
		return ws, true
	}
	e := newError(http.StatusUnauthorized, TypeUnauthorized, "The root key is not valid.")
	reason := AuthUnknownKey
	if missing {
		e = newError(http.StatusUnauthorized, TypeMissingAuth, "Send a root key: \"Authorization: Bearer <root key>\".")
		reason = AuthMissing
	}
	s.authFail.record(reason, endpoint, r.RemoteAddr, x.id)
	x.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
	s.writeError(x, e)
	return "", false
}

// checkContentType returns nil if the Content-Type value ct is
// application/json whose charset, if given, is UTF-8 ("utf-8" or "utf8",
// in any case), else the 415 to answer: the body is always read as UTF-8,
// so a body declared in another charset is refused rather than misread.
func checkContentType(ct string) *apiError {
	const want = "application/json"
	if strings.EqualFold(ct, want) {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != want {
		e := newError(http.StatusUnsupportedMediaType, TypeUnsupportedMedia, "Send the body as Content-Type: application/json.")
		e.Errors = []FieldError{{Location: "header.Content-Type", Message: "must be application/json", Fix: "Set Content-Type: application/json."}}
		return e
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		e := newError(http.StatusUnsupportedMediaType, TypeUnsupportedMedia, "Send the body in UTF-8: the charset "+quote(cs)+" is not supported.")
		e.Errors = []FieldError{{Location: "header.Content-Type", Message: "has the charset " + quote(cs) + "; only utf-8 is supported", Fix: "Send UTF-8 and set Content-Type: application/json (or application/json; charset=utf-8)."}}
		return e
	}
	return nil
}

// Answers to bodies larger than MaxBodyBytes: after the 413 the connection is
// closed, but first up to maxDiscardBytes more of the body are read and
// discarded, for at most discardTimeout, so that a client still sending
// (Node's fetch, curl) reads the 413 rather than a connection reset.
const (
	maxDiscardBytes = 8 << 20
	discardTimeout  = 5 * time.Second
)

// readBody reads the request body into x.body. A body larger than
// MaxBodyBytes is answered with a 413, an unreadable one with a 400; readBody
// then returns false.
func (s *Server) readBody(x *exchange, r *http.Request) bool {
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		s.refuseBody(x, r)
		return false
	}
	b := x.body[:0]
	if r.ContentLength > 0 {
		b = slices.Grow(b, int(r.ContentLength)+1) // +1: the read that sees EOF
	}
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, 512)
		}
		n, err := r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			x.body = b[:0]
			s.refuseBody(x, r)
			return false
		}
		if err == io.EOF {
			x.body = b
			return true
		}
		if err != nil {
			x.body = b[:0]
			s.writeError(x, badRequest([]FieldError{{Location: "body", Message: "could not be read: " + err.Error()}}))
			return false
		}
	}
}

// refuseBody answers 413 and closes the connection, after discarding what the
// client still sends (see maxDiscardBytes).
func (s *Server) refuseBody(x *exchange, r *http.Request) {
	_ = http.NewResponseController(x).SetReadDeadline(time.Now().Add(discardTimeout))
	_, _ = io.CopyN(io.Discard, r.Body, maxDiscardBytes)
	e := newError(http.StatusRequestEntityTooLarge, TypeBodyTooLarge, fmt.Sprintf("The request body exceeds %d bytes.", s.cfg.MaxBodyBytes))
	e.Errors = []FieldError{{Location: "body", Message: fmt.Sprintf("is larger than %d bytes", s.cfg.MaxBodyBytes)}}
	x.Header().Set("Connection", "close")
	s.writeError(x, e)
}

func (s *Server) writeError(x *exchange, e *apiError) {
	x.out = appendError(x.out[:0], x.id, e)
	send(x, e.Status, x.out)
}

// Header values shared by every response; net/http never modifies them.
var (
	jsonContentType = []string{"application/json"}
	noStore         = []string{"no-store"}
)

// send writes a JSON response. net/http adds the Content-Length of a small
// body itself (it buffers the response until the handler returns); a large
// one gets it here, rather than a chunked encoding.
func send(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Cache-Control"] = noStore
	if len(b) > 2048 {
		h.Set("Content-Length", strconv.Itoa(len(b)))
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (s *Server) liveness(x *exchange, _ *http.Request) {
	x.out = appendOK(x.out[:0], x.id, []byte(`{"message":"OK"}`), nil)
	send(x, http.StatusOK, x.out)
}
