package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
