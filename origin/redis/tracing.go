package redis

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the origin's spans.
const TracerName = "github.com/sluicehq/sluice/origin/redis"

// AttrCells is the span attribute holding the number of cells a call reads or
// writes.
const AttrCells = attribute.Key("sluice.cells")

// commands names the Redis commands behind each operation, for the span's
// db.operation.name.
var commands = map[Op]string{OpLoad: "MGET", OpApply: "EVALSHA", OpDecide: "EVALSHA"}

// startSpan starts a client span for op if tracing is configured and ctx
// carries a recording span; otherwise it returns nil and costs one context
// lookup. A call to a master of a Redis Cluster carries the master's address
// (server.address); master is "" otherwise.
func (o *Origin) startSpan(ctx context.Context, op Op, master string, cells int) trace.Span {
	if o.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return nil
	}
	attrs := []attribute.KeyValue{
		semconv.DBSystemNameRedis,
		semconv.DBOperationName(commands[op]),
		AttrCells.Int(cells),
	}
	if master != "" {
		attrs = append(attrs, semconv.ServerAddress(master))
	}
	_, span := o.tracer.Start(ctx, "redis "+string(op),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return span
}

// endSpan records err, if any, and ends span.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
