package server

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// TestServices checks that a mounted service keeps its own responses (no
// JSON, no method check, no root key) while it gets a request id, metrics and
// a span; and that a panic aborts the response instead of writing JSON.
func TestServices(t *testing.T) {
	rec, tp := recordSpans(t)
	const path = "/pkg.Service/Method"
	s := newServerWith(t, Config{
		TracerProvider: tp,
		RootKeys:       []RootKey{{Key: "service-test-key-01", Workspace: "w"}},
		Services: map[string]http.Handler{
			path: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Panic") != "" {
					panic("boom")
				}
				w.Header().Set("Content-Type", "application/grpc")
				w.Header().Set("Grpc-Status", "0")
				_, _ = w.Write([]byte("raw"))
			}),
		},
	})
	h := s.Handler()

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPut, path, strings.NewReader("x")))
	if w.Code != 200 || w.Body.String() != "raw" || w.Header().Get("Content-Type") != "application/grpc" {
		t.Fatalf("service response %d %q %q: want the handler's own", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	if w.Header().Get("X-Request-Id") == "" {
		t.Error("no X-Request-Id")
	}
	if spans := rec.Ended(); len(spans) != 1 || spans[0].Name() != "PUT "+path {
		t.Errorf("spans %v, want one named %q", spans, "PUT "+path)
	}
	var m dto.Metric
	if err := s.cfg.Metrics.requests.WithLabelValues("pkg.Service/Method", "200").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("requests metric %v (%v), want 1", m.GetCounter().GetValue(), err)
	}

	req := httptest.NewRequest(http.MethodPost, path, nil)
	req.Header.Set("X-Panic", "1")
	defer func() {
		if v := recover(); v != http.ErrAbortHandler { //nolint:errorlint // identity, as net/http checks it
			t.Fatalf("recovered %v, want http.ErrAbortHandler", v)
		}
	}()
	h.ServeHTTP(httptest.NewRecorder(), req)
	t.Fatal("a panicking service did not abort")
}

func TestServicesValidate(t *testing.T) {
	ok := http.NotFoundHandler()
	for _, tc := range []struct {
		name     string
		services map[string]http.Handler
		valid    bool
	}{
		{"grpc path", map[string]http.Handler{"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit": ok}, true},
		{"nil handler", map[string]http.Handler{"/a/b": nil}, false},
		{"relative", map[string]http.Handler{"a/b": ok}, false},
		{"root", map[string]http.Handler{"/": ok}, false},
		{"metrics", map[string]http.Handler{"/metrics": ok}, false},
		{"api", map[string]http.Handler{"/v2/ratelimit.limit": ok}, false},
		{"pattern", map[string]http.Handler{"/a/{x}": ok}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Limiter: &sluice.Limiter{}, Catalog: &store.Cache{}, Services: tc.services}
			err := cfg.Validate()
			if tc.valid != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
				t.Fatalf("Validate() = %v, want valid %v", err, tc.valid)
			}
		})
	}
}
