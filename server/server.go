// Package server is Sluice's HTTP API: Unkey's v2 rate-limit endpoints
// (ratelimit.limit, multiLimit, setOverride, getOverride, listOverrides,
// deleteOverride), liveness and Prometheus metrics, with root-key
// authentication that confines every key to one workspace.
//
// Bodies are decoded strictly (exact field names, no unknown or duplicate
// fields, no trailing data, integers within ±(2^53-1), names of 1-512 bytes
// of printable UTF-8); every response, error or not, is JSON and carries
// meta.requestId. A denial is a 200 with success:false.
package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
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

// Limiter decides rate-limit requests; *sluice.Limiter implements it.
type Limiter interface {
	Ratelimit(ctx context.Context, r sluice.Request) (sluice.Response, error)
	RatelimitMany(ctx context.Context, rs []sluice.Request) ([]sluice.Response, error)
}

// Config configures a [Server].
type Config struct {
	// Limiter makes the decisions. Required.
	Limiter Limiter
	// Catalog holds namespaces and overrides. Required.
	Catalog *store.Cache
	// RootKeys are the accepted bearer keys. Empty means any bearer token
	// acts in workspace OpenWorkspace ("default"); the caller must allow
	// that only on a loopback address (cmd/sluice does).
	RootKeys []RootKey
	// Logger receives request errors. Default: discard.
	Logger *slog.Logger
	// Metrics, if set, are updated on every request. Default: none.
	Metrics *Metrics
	// Gatherer, if set, is served at GET /metrics.
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
	kr, err := newKeyring(cfg.RootKeys)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s := &Server{cfg: cfg, keys: kr, mux: http.NewServeMux(), idBase: "req_" + hex.EncodeToString(b[:]), tracing: newTracing(cfg.TracerProvider)}
	s.route("/v2/ratelimit.limit", s.limit)
	s.route("/v2/ratelimit.multiLimit", s.multiLimit)
	s.route("/v2/ratelimit.setOverride", s.setOverride)
	s.route("/v2/ratelimit.getOverride", s.getOverride)
	s.route("/v2/ratelimit.listOverrides", s.listOverrides)
	s.route("/v2/ratelimit.deleteOverride", s.deleteOverride)
	for path, h := range cfg.Services {
		s.mountService(path, h)
	}
	s.mux.Handle("/v2/liveness", s.wrap("liveness", "/v2/liveness", http.MethodGet, s.liveness))
	if cfg.Gatherer != nil {
		prom := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})
		s.mux.Handle("/metrics", s.wrap("metrics", "/metrics", http.MethodGet, func(w http.ResponseWriter, r *http.Request, _ string) {
			prom.ServeHTTP(w, r)
		}))
	}
	s.mux.Handle("/", s.wrap("not_found", "", "", func(w http.ResponseWriter, r *http.Request, id string) {
		s.writeError(w, id, newError(http.StatusNotFound, TypeRouteNotFound, "No endpoint "+r.Method+" "+r.URL.Path+"."))
	}))
	return s, nil
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// meta is the meta object of every response.
type meta struct {
	RequestID string `json:"requestId"`
}

type okBody struct {
	Meta       meta        `json:"meta"`
	Data       any         `json:"data"`
	Pagination *pagination `json:"pagination,omitempty"`
}

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
}

// apiHandler handles an authenticated call with a read body.
type apiHandler func(c *call) (data any, page *pagination, err *apiError)

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

func (s *Server) requestID() string {
	return s.idBase + strconv.FormatUint(s.idCount.Add(1), 36)
}

// instrument gives every request a request id (X-Request-Id), request
// metrics under endpoint and a trace span named after route ("" for unrouted
// paths), then calls h.
func (s *Server) instrument(endpoint, route string, h func(w *statusWriter, r *http.Request, id string)) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := s.requestID()
		w := &statusWriter{ResponseWriter: rw}
		w.Header().Set("X-Request-Id", id)
		r, span := s.tracing.start(r, route, id)
		defer func() { s.tracing.end(span, w.status()) }()
		if m := s.cfg.Metrics; m != nil {
			m.inFlight.Inc()
			defer func() {
				m.inFlight.Dec()
				m.requests.WithLabelValues(endpoint, strconv.Itoa(w.status())).Inc()
				m.latency.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
			}()
		}
		h(w, r, id)
	})
}

// wrap instruments an endpoint of the JSON API and adds the method check and
// panic recovery (a JSON 500). method "" accepts any method.
func (s *Server) wrap(endpoint, route, method string, h func(http.ResponseWriter, *http.Request, string)) http.Handler {
	return s.instrument(endpoint, route, func(w *statusWriter, r *http.Request, id string) {
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				s.logPanic(id, endpoint, v)
				if w.code == 0 {
					s.writeError(w, id, unexpected())
				}
			}
		}()
		if method != "" && r.Method != method && (method != http.MethodGet || r.Method != http.MethodHead) {
			w.Header().Set("Allow", method)
			s.writeError(w, id, newError(http.StatusMethodNotAllowed, TypeMethodNotAllowed, endpoint+" accepts "+method+" only, not "+r.Method+"."))
			return
		}
		h(w, r, id)
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
	s.mux.Handle(path, s.instrument(endpoint, path, func(w *statusWriter, r *http.Request, id string) {
		defer func() {
			if v := recover(); v != nil && v != http.ErrAbortHandler { //nolint:errorlint // sentinel identity, as net/http checks it
				s.logPanic(id, endpoint, v)
				panic(http.ErrAbortHandler)
			}
		}()
		h.ServeHTTP(w, r)
	}))
}

// route mounts an authenticated POST endpoint with a JSON body.
func (s *Server) route(path string, h apiHandler) {
	endpoint := path[len("/v2/"):]
	s.mux.Handle(path, s.wrap(endpoint, path, http.MethodPost, func(w http.ResponseWriter, r *http.Request, id string) {
		ws, missing, ok := s.keys.authenticate(r.Header.Get("Authorization"))
		if !ok {
			e := newError(http.StatusUnauthorized, TypeUnauthorized, "The root key is not valid.")
			if missing {
				e = newError(http.StatusUnauthorized, TypeMissingAuth, "Send a root key: \"Authorization: Bearer <root key>\".")
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			s.writeError(w, id, e)
			return
		}
		span := s.tracing.recording(r)
		if span != nil {
			span.SetAttributes(AttrWorkspace.String(ws))
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			e := newError(http.StatusUnsupportedMediaType, TypeUnsupportedMedia, "Send the body as Content-Type: application/json.")
			e.Errors = []FieldError{{Location: "header.Content-Type", Message: "must be application/json", Fix: "Set Content-Type: application/json."}}
			s.writeError(w, id, e)
			return
		}
		tooLarge := func() {
			e := newError(http.StatusRequestEntityTooLarge, TypeBodyTooLarge, fmt.Sprintf("The request body exceeds %d bytes.", s.cfg.MaxBodyBytes))
			e.Errors = []FieldError{{Location: "body", Message: fmt.Sprintf("is larger than %d bytes", s.cfg.MaxBodyBytes)}}
			w.Header().Set("Connection", "close")
			s.writeError(w, id, e)
		}
		if r.ContentLength > s.cfg.MaxBodyBytes {
			tooLarge()
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				tooLarge()
				return
			}
			s.writeError(w, id, badRequest([]FieldError{{Location: "body", Message: "could not be read: " + err.Error()}}))
			return
		}
		data, page, e := h(&call{ctx: r.Context(), workspace: ws, body: body, span: span})
		if e != nil {
			if e.Status >= 500 {
				s.cfg.Logger.Error("server: request failed", "requestId", id, "endpoint", endpoint, "workspace", ws, "detail", e.Detail)
			}
			s.writeError(w, id, e)
			return
		}
		s.writeJSON(w, http.StatusOK, okBody{Meta: meta{RequestID: id}, Data: data, Pagination: page})
	}))
}

func (s *Server) writeError(w http.ResponseWriter, id string, e *apiError) {
	s.writeJSON(w, e.Status, errorBody{Meta: meta{RequestID: id}, Error: e})
}

func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v) // appends '\n'
	b := buf.Bytes()
	if err != nil { // cannot happen with the types above
		s.cfg.Logger.Error("server: encode response", "err", err)
		status, b = http.StatusInternalServerError, []byte(`{"meta":{"requestId":""},"error":{"title":"Internal Server Error","detail":"encoding failed","status":500,"type":"`+TypeUnexpected+`"}}`+"\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (s *Server) liveness(w http.ResponseWriter, _ *http.Request, id string) {
	s.writeJSON(w, http.StatusOK, okBody{Meta: meta{RequestID: id}, Data: map[string]string{"message": "OK"}})
}
