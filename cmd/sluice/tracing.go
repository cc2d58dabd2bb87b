package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracingEnabled reports whether tracing is configured: by --otel-endpoint,
// or by the standard OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variables, unless OTEL_SDK_DISABLED is
// true. Tracing is off by default.
func (c *serveCmd) tracingEnabled() bool {
	if disabled, _ := strconv.ParseBool(os.Getenv("OTEL_SDK_DISABLED")); disabled {
		return false
	}
	return c.OTelEndpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// tracesURL returns the OTLP/HTTP traces URL of --otel-endpoint: the URL as
// given when it has a path, else the URL with the standard /v1/traces path.
func tracesURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--otel-endpoint %q: want http(s)://host:port[/path], e.g. http://127.0.0.1:4318", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// newTracerProvider returns the tracer provider of the server, or nil when
// tracing is off. Spans go in batches to an OTLP/HTTP collector; the
// exporter also reads the standard OTEL_EXPORTER_OTLP_* variables (headers,
// timeout, compression, TLS). New traces are sampled at --otel-sample-ratio;
// a caller's sampling decision (traceparent) is followed. The caller must
// Shutdown the provider, which exports the spans still queued.
func (c *serveCmd) newTracerProvider(ctx context.Context, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	if !c.tracingEnabled() {
		return nil, nil
	}
	var opts []otlptracehttp.Option
	if c.OTelEndpoint != "" {
		u, err := tracesURL(c.OTelEndpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u))
	}
	exporter, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(
			semconv.ServiceName("sluice"),
			semconv.ServiceVersion(version),
			attribute.String("sluice.region", c.Region),
		),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	// Export failures are reported through OpenTelemetry's process-wide
	// handler; route them to this server's log.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: export failed", "err", err)
	}))
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.OTelSampleRatio))),
	), nil
}

// tracerProvider converts p for the server's Config fields: a nil
// *TracerProvider must become a nil interface, not a typed nil.
func tracerProvider(p *sdktrace.TracerProvider) trace.TracerProvider {
	if p == nil {
		return nil
	}
	return p
}
