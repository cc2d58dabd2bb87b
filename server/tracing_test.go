package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// recordSpans returns a tracer provider that keeps every ended span in the
// returned recorder, shut down when t ends.
func recordSpans(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

// tracingParent is the traceparent header of the case that continues a
// caller's trace.
const tracingParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// A tracingCase is a request and the server span it must end.
type tracingCase struct {
	name, method, path, body, traceparent string
	wantName                              string
	wantCode                              int64
	wantAttrs                             map[attribute.Key]attribute.Value
	wantParent                            bool
}

// tracingCases are TestTracing's cases, in order: the denial follows the
// admission of the same counter.
var tracingCases = []tracingCase{
	{
		name: "limit continues the caller's trace", method: http.MethodPost, path: "/v2/ratelimit.limit",
		body:        `{"namespace":"api","identifier":"u1","limit":1,"duration":60000}`,
		traceparent: tracingParent, wantName: "POST /v2/ratelimit.limit", wantCode: 200, wantParent: true,
		wantAttrs: map[attribute.Key]attribute.Value{
			"http.route":          attribute.StringValue("/v2/ratelimit.limit"),
			AttrWorkspace:         attribute.StringValue(OpenWorkspace),
			AttrNamespace:         attribute.StringValue("api"),
			AttrSuccess:           attribute.BoolValue(true),
			"url.path":            attribute.StringValue("/v2/ratelimit.limit"),
			"http.request.method": attribute.StringValue("POST"),
		},
	},
	{
		name: "denial is a success:false attribute, not an error", method: http.MethodPost, path: "/v2/ratelimit.limit",
		body:     `{"namespace":"api","identifier":"u1","limit":1,"duration":60000}`,
		wantName: "POST /v2/ratelimit.limit", wantCode: 200,
		wantAttrs: map[attribute.Key]attribute.Value{AttrSuccess: attribute.BoolValue(false)},
	},
	{
		name: "multiLimit records the number of checks", method: http.MethodPost, path: "/v2/ratelimit.multiLimit",
		body:     `[{"namespace":"api","identifier":"a","limit":5,"duration":1000},{"namespace":"api","identifier":"b","limit":5,"duration":1000}]`,
		wantName: "POST /v2/ratelimit.multiLimit", wantCode: 200,
		wantAttrs: map[attribute.Key]attribute.Value{AttrChecks: attribute.IntValue(2), AttrSuccess: attribute.BoolValue(true)},
	},
	{
		name: "bad request", method: http.MethodPost, path: "/v2/ratelimit.limit", body: `{}`,
		wantName: "POST /v2/ratelimit.limit", wantCode: 400,
	},
	{
		name: "wrong method", method: http.MethodGet, path: "/v2/ratelimit.limit",
		wantName: "GET /v2/ratelimit.limit", wantCode: 405,
	},
	{
		name: "unrouted path is named by its method only", method: http.MethodGet, path: "/nope",
		wantName: "GET", wantCode: 404,
	},
	{
		name: "liveness", method: http.MethodGet, path: "/v2/liveness",
		wantName: "GET /v2/liveness", wantCode: 200,
	},
}

// TestTracing sends each of tracingCases and checks the one server span it
// ends: its name, kind, status, attributes and parent.
func TestTracing(t *testing.T) {
	rec, tp := recordSpans(t)
	h := newServerWith(t, Config{TracerProvider: tp}).Handler()
	for _, tc := range tracingCases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(rec.Ended())
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer anything")
			req.Header.Set("Content-Type", "application/json")
			if tc.traceparent != "" {
				req.Header.Set("Traceparent", tc.traceparent)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			spans := rec.Ended()[before:]
			if len(spans) != 1 {
				t.Fatalf("got %d spans, want 1", len(spans))
			}
			checkServerSpan(t, spans[0], tc, w)
		})
	}
}

// checkServerSpan checks span, the server span of tc answered in w.
func checkServerSpan(t *testing.T, span sdktrace.ReadOnlySpan, tc tracingCase, w *httptest.ResponseRecorder) {
	t.Helper()
	if span.Name() != tc.wantName {
		t.Errorf("name %q, want %q", span.Name(), tc.wantName)
	}
	if span.SpanKind() != trace.SpanKindServer {
		t.Errorf("kind %v, want server", span.SpanKind())
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range span.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if got := attrs["http.response.status_code"].AsInt64(); got != tc.wantCode || int64(w.Code) != tc.wantCode {
		t.Errorf("status attribute %d, response %d, want %d", got, w.Code, tc.wantCode)
	}
	if got := attrs[AttrRequestID].AsString(); got == "" || got != w.Header().Get("X-Request-Id") {
		t.Errorf("request id attribute %q, header %q", got, w.Header().Get("X-Request-Id"))
	}
	for k, v := range tc.wantAttrs {
		if attrs[k] != v {
			t.Errorf("attribute %s = %v, want %v", k, attrs[k].String(), v.String())
		}
	}
	if _, ok := attrs["sluice.identifier"]; ok {
		t.Error("identifiers must not be recorded")
	}
	if span.Status().Code == codes.Error {
		t.Errorf("status %v: only a 5xx fails a server span", span.Status())
	}
	parentID := span.Parent().TraceID().String()
	if tc.wantParent && (parentID != "4bf92f3577b34da6a3ce929d0e0e4736" || span.SpanContext().TraceID().String() != parentID) {
		t.Errorf("trace %s, parent %v: want the caller's trace", span.SpanContext().TraceID(), span.Parent())
	}
	if !tc.wantParent && span.Parent().IsValid() {
		t.Errorf("unexpected parent %v", span.Parent())
	}
}

// TestTracingPanicFailsSpan checks that a recovered panic ends the span as a
// failed 500.
func TestTracingPanicFailsSpan(t *testing.T) {
	rec, tp := recordSpans(t)
	s := newServerWith(t, Config{TracerProvider: tp})
	h := s.wrap("boom", "/boom", "", func(*exchange, *http.Request) { panic("boom") })
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/boom", nil))
	spans := rec.Ended()
	if w.Code != 500 || len(spans) != 1 || spans[0].Status().Code != codes.Error {
		t.Fatalf("code %d, spans %d: want one failed span for a 500", w.Code, len(spans))
	}
}

// BenchmarkLimitTracing measures what a span costs a limit call: "off" is
// the default server (no provider), "on" samples every span into a batching
// pipeline whose exporter discards them, "1%" samples one trace in a hundred.
func BenchmarkLimitTracing(b *testing.B) {
	for _, tc := range []struct {
		name  string
		on    bool
		ratio float64
	}{{"off", false, 0}, {"on", true, 1}, {"1%", true, 0.01}} {
		b.Run(tc.name, func(b *testing.B) {
			var cfg Config
			if tc.on {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()),
					sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(tc.ratio))))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				cfg.TracerProvider = tp
			}
			h := newServerWith(b, cfg).Handler()
			body := `{"namespace":"api","identifier":"u","limit":1000000000,"duration":60000}`
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v2/ratelimit.limit", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer x")
				req.Header.Set("Content-Type", "application/json")
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}
