package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// drainCase is one case of TestDrain.
type drainCase struct {
	name           string
	timeout, grace time.Duration
	// handle blocks until the handler may answer, and returns the body.
	handle func(r *http.Request, release <-chan struct{}) string
	// releaseEarly closes release once drain has started; otherwise it is
	// closed after drain has returned.
	releaseEarly bool
	// wantBody is the answer the client must get; "" means the connection
	// is closed without one.
	wantBody string
	// handlerFirst: the handler has returned when drain returns.
	handlerFirst bool
	// within bounds how long drain takes: well under the grace when the
	// handler returns, a little over timeout + grace otherwise.
	within  time.Duration
	wantLog []string
	notLog  []string
}

// TestDrain serves one request whose handler blocks, drains the server as
// `sluice serve` does on SIGTERM, and checks what the client gets and
// whether drain returned after the handler: the closers, and with them the
// limiter's final flush, run once drain has returned, so a handler still
// running then could admit after the flush.
func TestDrain(t *testing.T) {
	tests := []drainCase{
		{
			name: "answers within the timeout", timeout: 10 * time.Second, grace: 10 * time.Second,
			handle: func(r *http.Request, release <-chan struct{}) string {
				<-release
				return "released; context error: " + errText(r.Context().Err())
			},
			releaseEarly: true,
			wantBody:     "released; context error: none", handlerFirst: true, within: 5 * time.Second,
			wantLog: []string{"shutting down"},
			notLog:  []string{"drain timed out", "still running after the cut"},
		},
		{
			name: "cut when the drain times out", timeout: 20 * time.Millisecond, grace: 10 * time.Second,
			handle: func(r *http.Request, _ <-chan struct{}) string {
				<-r.Context().Done() // a limiter waiting on the origin stops here
				return "cut; context error: " + errText(r.Context().Err())
			},
			wantBody: "cut; context error: context canceled", handlerFirst: true, within: 5 * time.Second,
			wantLog: []string{"drain timed out", "running=1", "every request handler returned"},
			notLog:  []string{"still running after the cut"},
		},
		{
			name: "ignores the cut", timeout: 20 * time.Millisecond, grace: 50 * time.Millisecond,
			handle: func(_ *http.Request, release <-chan struct{}) string {
				<-release
				return "too late"
			},
			wantBody: "", handlerFirst: false, within: 2 * time.Second,
			wantLog: []string{"drain timed out", "still running after the cut", "running=1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { testDrain(t, tc) })
	}
}

func testDrain(t *testing.T, tc drainCase) {
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	release := make(chan struct{})
	started, handled := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(handled)
		close(started)
		_, _ = io.WriteString(w, tc.handle(r, release))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, reqs, serveErr := serveAPI(h, ln, nil, log)
	answer := get(t, "http://"+ln.Addr().String()+"/")
	<-started

	begin := time.Now()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		drain(srv, reqs, serveErr, tc.timeout, tc.grace, log)
	}()
	if tc.releaseEarly {
		close(release) // the drain is waiting for it, or about to
	}
	<-drained
	elapsed := time.Since(begin)
	select {
	case <-handled:
		if !tc.handlerFirst {
			t.Error("the handler returned before drain, although it ignores the cut")
		}
	default:
		if tc.handlerFirst {
			t.Error("drain returned while the handler was still running: the final flush would run before it")
		}
	}
	if elapsed >= tc.within {
		t.Errorf("drain took %v, want less than %v", elapsed, tc.within)
	}
	if !tc.releaseEarly {
		close(release)
	}
	<-handled
	if got := <-answer; got != tc.wantBody {
		t.Errorf("the client got %q, want %q", got, tc.wantBody)
	}
	checkLog(t, logs.String(), tc.wantLog, tc.notLog)
}

// checkLog fails t unless out holds every string of want and none of not.
func checkLog(t *testing.T, out string, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("log lacks %q:\n%s", w, out)
		}
	}
	for _, n := range not {
		if strings.Contains(out, n) {
			t.Errorf("log has %q:\n%s", n, out)
		}
	}
}

// get sends GET url in the background; the channel gets the body of a 200
// answer, or "" when there is none (an error or another status).
func get(t *testing.T, url string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	tr := &http.Transport{}
	out := make(chan string, 1)
	go func() {
		defer cancel()
		defer tr.CloseIdleConnections()
		res, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			out <- ""
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != http.StatusOK {
			out <- ""
			return
		}
		out <- string(b)
	}()
	return out
}

func errText(err error) string {
	if err == nil {
		return "none"
	}
	return err.Error()
}

// lockedBuffer is a bytes.Buffer safe for concurrent use, for logs written
// by the server's goroutines while the test reads them.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
