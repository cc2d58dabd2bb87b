package server

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the server's spans.
const TracerName = "github.com/sluicehq/sluice/server"

// Span attributes the server adds to a rate-limit call's span, beside the
// HTTP semantic conventions. Identifiers are deliberately not recorded: they
// are often user ids or IP addresses.
const (
	AttrWorkspace  = attribute.Key("sluice.workspace")
	AttrNamespace  = attribute.Key("sluice.namespace")
	AttrSuccess    = attribute.Key("sluice.success")
	AttrChecks     = attribute.Key("sluice.checks")
	AttrOverrideID = attribute.Key("sluice.override_id")
	AttrRequestID  = attribute.Key("sluice.request_id")
)

// tracing starts a server span per request. The zero value (no provider)
// starts none and costs nothing.
type tracing struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

func newTracing(tp trace.TracerProvider) tracing {
	if tp == nil {
		return tracing{}
	}
	return tracing{
		tracer: tp.Tracer(TracerName, trace.WithSchemaURL(semconv.SchemaURL)),
		propagator: propagation.NewCompositeTextMapPropagator(
			propagation.TraceContext{}, propagation.Baggage{}),
	}
}

// start continues the caller's trace (W3C traceparent) with a server span for
// route and returns r with the span in its context. It returns r and nil when
// tracing is off. The span's attributes are built only if it is recorded:
// most requests of a sampled deployment are not, so samplers see the span's
// name and kind, not its attributes.
func (t tracing) start(r *http.Request, route, requestID string) (*http.Request, trace.Span) {
	if t.tracer == nil {
		return r, nil
	}
	ctx := t.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	name := r.Method + " " + route
	if route == "" {
		name = r.Method
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(
			semconv.HTTPRequestMethodKey.String(r.Method),
			semconv.URLPath(r.URL.Path),
			semconv.URLScheme("http"),
			semconv.NetworkProtocolVersion(strconv.Itoa(r.ProtoMajor)+"."+strconv.Itoa(r.ProtoMinor)),
			AttrRequestID.String(requestID),
		)
		if route != "" {
			span.SetAttributes(semconv.HTTPRoute(route))
		}
		if ua := r.UserAgent(); ua != "" {
			span.SetAttributes(semconv.UserAgentOriginal(ua))
		}
	}
	return r.WithContext(ctx), span
}

// end records the response status and ends span; a 5xx marks it failed, as
// the HTTP conventions ask of server spans (a 4xx is the client's error).
func (tracing) end(span trace.Span, code int) {
	if span == nil {
		return
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(code))
	if code >= http.StatusInternalServerError {
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(code)))
		span.SetStatus(codes.Error, http.StatusText(code))
	}
	span.End()
}

// recording returns the span of r if tracing is on and the span is being
// recorded, else nil: callers build attributes only for a non-nil span, so
// tracing costs nothing when it is off or the request is not sampled.
func (t tracing) recording(r *http.Request) trace.Span {
	if t.tracer == nil {
		return nil
	}
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		return span
	}
	return nil
}
