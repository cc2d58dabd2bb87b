package redis

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/origin"
)

// TestTracing checks, against the real Redis, that calls made for a traced
// request become client spans under the request's span, that untraced
// (background) calls make none, and that a failed call fails its span.
func TestTracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	o := newOrigin(t, Config{Client: realRedis(t), TracerProvider: tp})
	k := origin.Key{Workspace: workspace(t), Namespace: "n", Identifier: "i", Duration: time.Minute}
	deltas := []origin.Delta{add(origin.Cell{Key: k, Sequence: 7}, 3)}

	tests := []struct {
		name     string
		traced   bool
		call     func(ctx context.Context) error
		wantSpan string
		wantOp   string
		wantErr  bool
	}{
		{name: "apply without a trace makes no span", call: func(ctx context.Context) error { _, err := o.Apply(ctx, deltas); return err }},
		{name: "load without a trace makes no span", call: func(ctx context.Context) error { _, err := o.Load(ctx, k, 7); return err }},
		{name: "traced load", traced: true, wantSpan: "redis load", wantOp: "MGET",
			call: func(ctx context.Context) error { _, err := o.Load(ctx, k, 7); return err }},
		{name: "traced apply", traced: true, wantSpan: "redis apply", wantOp: "EVALSHA",
			call: func(ctx context.Context) error { _, err := o.Apply(ctx, deltas); return err }},
		{name: "traced call that fails", traced: true, wantSpan: "redis load", wantOp: "MGET", wantErr: true,
			call: func(ctx context.Context) error {
				ctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
				defer cancel()
				_, err := o.Load(ctx, k, 7)
				return err
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(rec.Ended())
			ctx := context.Background()
			var parent trace.Span
			if tc.traced {
				ctx, parent = tp.Tracer("test").Start(ctx, "request")
			}
			err := tc.call(ctx)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if parent != nil {
				parent.End()
			}
			var spans []sdktrace.ReadOnlySpan
			for _, s := range rec.Ended()[before:] {
				if s.Name() != "request" {
					spans = append(spans, s)
				}
			}
			if tc.wantSpan == "" {
				if len(spans) != 0 {
					t.Fatalf("got %d spans, want none", len(spans))
				}
				return
			}
			if len(spans) != 1 {
				t.Fatalf("got %d spans, want 1", len(spans))
			}
			s := spans[0]
			if s.Name() != tc.wantSpan || s.SpanKind() != trace.SpanKindClient {
				t.Errorf("span %q kind %v, want %q client", s.Name(), s.SpanKind(), tc.wantSpan)
			}
			if s.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("parent %v, want the request span", s.Parent().SpanID())
			}
			attrs := attribute.NewSet(s.Attributes()...)
			if v, _ := attrs.Value("db.system.name"); v.AsString() != "redis" {
				t.Errorf("db.system.name = %q", v.AsString())
			}
			if v, _ := attrs.Value("db.operation.name"); v.AsString() != tc.wantOp {
				t.Errorf("db.operation.name = %q, want %q", v.AsString(), tc.wantOp)
			}
			if failed := s.Status().Code == codes.Error; failed != tc.wantErr {
				t.Errorf("span status %v, want failed %v", s.Status(), tc.wantErr)
			}
		})
	}
}
