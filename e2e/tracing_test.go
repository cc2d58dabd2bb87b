package e2e

import (
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testenv"
)

// collector is an OTLP/HTTP trace receiver: it decodes every export the
// server sends, as a real collector would.
type collector struct {
	srv *httptest.Server

	mu    sync.Mutex
	spans []exported
}

// exported is one received span with its resource's service name.
type exported struct {
	service string
	span    *tracepb.Span
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
			t.Errorf("collector: %s %s (%s): %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			var service string
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					c.spans = append(c.spans, exported{service: service, span: s})
				}
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) received() []exported {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]exported(nil), c.spans...)
}

// limitTraced calls ratelimit.limit with a traceparent header ("" sends none).
func limitTraced(t *testing.T, n *node, traceparent, identifier string) {
	t.Helper()
	body := fmt.Sprintf(`{"namespace":"traced","identifier":%q,"limit":10,"duration":60000}`, identifier)
	req, err := http.NewRequest(http.MethodPost, n.URL+"/v2/ratelimit.limit", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer any")
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("Traceparent", traceparent)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
}

// TestTracing runs the real binary against an OTLP receiver: a traced call
// continues the caller's trace, the Redis read it makes is a child span, the
// spans are exported by the graceful shutdown at the latest, new traces
// follow --otel-sample-ratio, and OTEL_SDK_DISABLED turns tracing off.
func TestTracing(t *testing.T) {
	const (
		traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
		parentID = "00f067aa0ba902b7"
		sampled  = "00-" + traceID + "-" + parentID + "-01"
	)
	redisURL := "redis://" + testenv.RedisAddr(t) + "/0"

	t.Run("traced call with a Redis read", func(t *testing.T) {
		c := newCollector(t)
		n := start(t, nil, "--otel-endpoint", c.srv.URL, "--redis-url", redisURL)
		id := fmt.Sprintf("u-%d", time.Now().UnixNano()) // a cold counter: hydrated from Redis
		limitTraced(t, n, sampled, id)
		if err := n.stop(15 * time.Second); err != nil {
			t.Fatalf("stop: %v\n%s", err, n.logs())
		}
		byName := map[string]exported{}
		for _, e := range c.received() {
			byName[e.span.GetName()] = e
		}
		srv, ok := byName["POST /v2/ratelimit.limit"]
		if !ok {
			t.Fatalf("no server span among %d exported spans\n%s", len(byName), n.logs())
		}
		if srv.service != "sluice" {
			t.Errorf("service.name %q, want sluice", srv.service)
		}
		if got := hex.EncodeToString(srv.span.GetTraceId()); got != traceID {
			t.Errorf("trace id %s, want the caller's %s", got, traceID)
		}
		if got := hex.EncodeToString(srv.span.GetParentSpanId()); got != parentID {
			t.Errorf("parent %s, want the caller's span %s", got, parentID)
		}
		if srv.span.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("kind %v", srv.span.GetKind())
		}
		load, ok := byName["redis load"]
		if !ok {
			t.Fatalf("no Redis span: got %v", slices.Sorted(maps.Keys(byName)))
		}
		if string(load.span.GetParentSpanId()) != string(srv.span.GetSpanId()) {
			t.Errorf("the Redis span's parent is not the server span")
		}
	})

	t.Run("sample ratio 0 follows the caller only", func(t *testing.T) {
		c := newCollector(t)
		n := start(t, nil, "--otel-endpoint", c.srv.URL, "--otel-sample-ratio", "0")
		limitTraced(t, n, "", "a")
		limitTraced(t, n, sampled, "b")
		limitTraced(t, n, "00-"+traceID+"-"+parentID+"-00", "c") // caller did not sample
		if err := n.stop(15 * time.Second); err != nil {
			t.Fatal(err)
		}
		got := c.received()
		if len(got) != 1 || hex.EncodeToString(got[0].span.GetTraceId()) != traceID {
			t.Fatalf("exported %d spans, want only the one of the sampled caller", len(got))
		}
	})

	t.Run("OTEL_SDK_DISABLED turns tracing off", func(t *testing.T) {
		c := newCollector(t)
		n := start(t, []string{"OTEL_SDK_DISABLED=true"}, "--otel-endpoint", c.srv.URL)
		limitTraced(t, n, sampled, "a")
		if err := n.stop(15 * time.Second); err != nil {
			t.Fatal(err)
		}
		if got := c.received(); len(got) != 0 {
			t.Fatalf("exported %d spans with tracing disabled", len(got))
		}
		if !strings.Contains(n.logs(), `"tracing":false`) {
			t.Errorf("the startup log does not say tracing is off:\n%s", n.logs())
		}
	})
}
