package server

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/analytics"
)

// reusedWriter is a ResponseWriter that a benchmark reuses across calls, so
// that the allocations measured are the server's, not the harness's.
type reusedWriter struct {
	header http.Header
	code   int
	n      int
}

func (w *reusedWriter) Header() http.Header { return w.header }

func (w *reusedWriter) WriteHeader(code int) { w.code = code }

func (w *reusedWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	return len(b), nil
}

// reset clears the writer for the next call.
func (w *reusedWriter) reset() {
	clear(w.header)
	w.code, w.n = 0, 0
}

// BenchmarkLimit measures one /v2/ratelimit.limit call through the server's
// handler, reusing the request and the writer: its allocations are the
// server's own (decoding, the decision, encoding, metrics).
func BenchmarkLimit(b *testing.B) {
	h := newTestServer(b).Handler()
	const body = `{"namespace":"api","identifier":"user-42","limit":1000000000,"duration":60000}`
	rd := strings.NewReader(body)
	req := httptest.NewRequest(http.MethodPost, "/v2/ratelimit.limit", rd)
	req.Header.Set("Authorization", "Bearer x")
	req.Header.Set("Content-Type", "application/json")
	w := &reusedWriter{header: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		w.reset()
		h.ServeHTTP(w, req)
		if w.code != http.StatusOK {
			b.Fatalf("status %d", w.code)
		}
	}
}

// BenchmarkLimitAnalytics is BenchmarkLimit without and with analytics,
// over 1,000 identifiers (every sketch evicts: the dearest case). With
// analytics, the queue is applied on the benchmark's goroutine every 4,096
// calls, inside the timer: the figure is the whole CPU a call costs,
// recording and applying, as sluice serve spends it on two goroutines.
func BenchmarkLimitAnalytics(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run("analytics="+strconv.FormatBool(on), func(b *testing.B) {
			var rec *analytics.Recorder
			cfg := Config{Analytics: noAnalytics{}}
			if on {
				var err error
				if rec, err = analytics.New(analytics.Config{}); err != nil {
					b.Fatal(err)
				}
				cfg.Analytics = rec
			}
			h := newServerWith(b, cfg).Handler()
			bodies := make([]string, 1000)
			for i := range bodies {
				bodies[i] = `{"namespace":"api","identifier":"user-` + strconv.Itoa(i) + `","limit":1000000000,"duration":60000}`
			}
			rd := strings.NewReader(bodies[0])
			req := httptest.NewRequest(http.MethodPost, "/v2/ratelimit.limit", rd)
			req.Header.Set("Authorization", "Bearer x")
			req.Header.Set("Content-Type", "application/json")
			w := &reusedWriter{header: http.Header{}}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				rd.Reset(bodies[i%len(bodies)])
				w.reset()
				h.ServeHTTP(w, req)
				if w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
				if i++; rec != nil && i%4096 == 0 {
					rec.Advance(time.Now())
				}
			}
		})
	}
}
