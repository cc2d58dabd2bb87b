package client_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
)

// fastRetry keeps the tests' backoffs short.
var fastRetry = client.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}

// op is one call of the API, on namespace ns. counting: the call counts
// against a limit, so it must never be sent twice.
type op struct {
	name     string
	counting bool
	call     func(ctx context.Context, c *client.Client, ns string) error
}

var ops = []op{
	{"Limit", true, func(ctx context.Context, c *client.Client, ns string) error {
		_, err := c.Limit(ctx, client.LimitRequest{Namespace: ns, Identifier: "x", Limit: 5, Duration: time.Minute, Cost: 1})
		return err
	}},
	{"MultiLimit", true, func(ctx context.Context, c *client.Client, ns string) error {
		_, err := c.MultiLimit(ctx, []client.LimitRequest{{Namespace: ns, Identifier: "x", Limit: 5, Duration: time.Minute, Cost: 1}})
		return err
	}},
	{"SetOverride", false, func(ctx context.Context, c *client.Client, ns string) error {
		_, err := c.SetOverride(ctx, ns, client.Override{Identifier: "o", Limit: 9, Duration: time.Minute})
		return err
	}},
	{"GetOverride", false, func(ctx context.Context, c *client.Client, ns string) error {
		_, err := c.GetOverride(ctx, ns, "o")
		return err
	}},
	{"ListOverrides", false, func(ctx context.Context, c *client.Client, ns string) error {
		for _, err := range c.ListOverrides(ctx, ns) {
			if err != nil {
				return err
			}
		}
		return nil
	}},
	{"DeleteOverride", false, func(ctx context.Context, c *client.Client, ns string) error {
		return c.DeleteOverride(ctx, ns, "o")
	}},
	{"Report", true, func(ctx context.Context, c *client.Client, ns string) error {
		_, err := c.Report(ctx, client.LimitRequest{Namespace: ns, Identifier: "x", Limit: 5, Duration: time.Minute, Cost: 1})
		return err
	}},
	{"MultiReport", true, func(ctx context.Context, c *client.Client, ns string) error {
		_, err := c.MultiReport(ctx, []client.LimitRequest{{Namespace: ns, Identifier: "x", Limit: 5, Duration: time.Minute, Cost: 1}})
		return err
	}},
}

// counted returns how many units of the counter of ops' Limit call are
// spent, by a peek.
func counted(t *testing.T, ns string) int64 {
	t.Helper()
	c := newClient(t, shared.URL)
	res, err := c.Limit(context.Background(), client.LimitRequest{Namespace: ns, Identifier: "x", Limit: 5, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return 5 - res.Remaining
}

// withOverride sets the override the calls of ops read and delete.
func withOverride(t *testing.T, ns string) {
	t.Helper()
	if err := ops[2].call(context.Background(), newClient(t, shared.URL), ns); err != nil {
		t.Fatal(err)
	}
}

// refusedAddr is a loopback address where nothing listens.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// refusingFirst is a transport whose first refusals dials go to an address
// where nothing listens (the connection is refused), and the later ones to
// the address asked for. dials counts them.
func refusingFirst(t *testing.T, refusals int64, dials *atomic.Int64) *http.Transport {
	refused := refusedAddr(t)
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) <= refusals {
			addr = refused
		}
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// TestRetriesARefusedConnection: every call, Limit included, is retried
// when its connection is refused, since the request never left; the retry
// reaches the real server and a Limit counts once.
func TestRetriesARefusedConnection(t *testing.T) {
	for _, o := range ops {
		for _, refusals := range []int64{2, 3} {
			t.Run(o.name+"/"+map[int64]string{2: "then answered", 3: "every attempt"}[refusals], func(t *testing.T) {
				ns := namespace(t)
				withOverride(t, ns)
				var dials atomic.Int64
				hc := &http.Client{Transport: refusingFirst(t, refusals, &dials)}
				c := newClient(t, shared.URL, client.WithHTTPClient(hc), client.WithRetry(fastRetry))
				err := o.call(context.Background(), c, ns)
				if dials.Load() != 3 {
					t.Errorf("%d dials, want 3", dials.Load())
				}
				if refusals == 3 {
					if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "attempt 3") {
						t.Fatalf("error %v, want a refused connection after attempt 3", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if o.counting && counted(t, ns) != 1 {
					t.Errorf("%d units counted, want 1", counted(t, ns))
				}
			})
		}
	}
}

// droppingListener reads each request whole, counts it and closes the
// connection without an answer: the request reached the server, the answer
// was lost.
func droppingListener(t *testing.T, requests *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if req, err := http.ReadRequest(bufio.NewReader(conn)); err == nil {
				_, _ = io.Copy(io.Discard, req.Body)
				requests.Add(1)
			}
			conn.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return "http://" + ln.Addr().String()
}

// TestNeverResendsACountingCall: once a request may have reached the
// server, Limit and MultiLimit are not sent again (it may have been
// counted); reads and idempotent writes are.
func TestNeverResendsACountingCall(t *testing.T) {
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			var requests atomic.Int64
			c := newClient(t, droppingListener(t, &requests), client.WithRetry(fastRetry))
			err := o.call(context.Background(), c, "n")
			want := int64(3)
			if o.counting {
				want = 1
			}
			if err == nil || requests.Load() != want {
				t.Errorf("%d requests received, error %v; want %d and an error", requests.Load(), err, want)
			}
			var e *client.APIError
			if errors.As(err, &e) {
				t.Errorf("a lost answer is reported as an API error: %v", err)
			}
		})
	}
}

// TestLostAnswerFromTheRealServer puts a proxy before the real server that
// loses the answer to the first request it forwards. A Limit is counted by
// that request and not sent again (it fails, and exactly one unit is
// spent); the other calls are retried and succeed, DeleteOverride too,
// though its retry finds the override already deleted.
func TestLostAnswerFromTheRealServer(t *testing.T) {
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			ns := namespace(t)
			withOverride(t, ns)
			var requests atomic.Int64
			upstream := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(upstream.CloseIdleConnections)
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := requests.Add(1)
				res, err := forward(upstream, r, shared.URL)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
				defer res.Body.Close()
				if n == 1 {
					panic(http.ErrAbortHandler) // closes the connection: the answer is lost
				}
				w.Header().Set("Content-Type", res.Header.Get("Content-Type"))
				w.WriteHeader(res.StatusCode)
				_, _ = io.Copy(w, res.Body)
			}))
			t.Cleanup(proxy.Close)
			c := newClient(t, proxy.URL, client.WithRetry(fastRetry))
			err := o.call(context.Background(), c, ns)
			if o.counting {
				if err == nil || requests.Load() != 1 || counted(t, ns) != 1 {
					t.Errorf("error %v, %d requests, %d units counted; want an error, 1 request, 1 unit", err, requests.Load(), counted(t, ns))
				}
				return
			}
			if err != nil || requests.Load() != 2 {
				t.Errorf("error %v after %d requests; want success on the second", err, requests.Load())
			}
		})
	}
}

// forward sends r to base with hc and returns the answer.
func forward(hc *http.Client, r *http.Request, base string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.Path, r.Body)
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	return hc.Do(req)
}

// fakeBodies are well-formed 200 answers of each endpoint.
var fakeBodies = map[string]string{
	"/v2/ratelimit.limit":          `{"meta":{"requestId":"req_f"},"data":{"limit":5,"remaining":4,"reset":1,"success":true}}`,
	"/v2/ratelimit.multiLimit":     `{"meta":{"requestId":"req_f"},"data":{"passed":true,"limits":[]}}`,
	"/v2/ratelimit.report":         `{"meta":{"requestId":"req_f"},"data":{"limit":5,"remaining":0,"reset":1,"success":true}}`,
	"/v2/ratelimit.multiReport":    `{"meta":{"requestId":"req_f"},"data":{"passed":true,"limits":[]}}`,
	"/v2/ratelimit.setOverride":    `{"meta":{"requestId":"req_f"},"data":{"overrideId":"rlor_1"}}`,
	"/v2/ratelimit.getOverride":    `{"meta":{"requestId":"req_f"},"data":{"overrideId":"rlor_1","duration":60000,"identifier":"o","limit":9}}`,
	"/v2/ratelimit.listOverrides":  `{"meta":{"requestId":"req_f"},"data":[],"pagination":{"hasMore":false}}`,
	"/v2/ratelimit.deleteOverride": `{"meta":{"requestId":"req_f"},"data":{}}`,
}

// TestRetriesGatewayErrors: a repeatable call answered 502, 503 or 504 is
// retried (here answered 200 the second time); a counting call is not, nor
// is any call answered another error status.
func TestRetriesGatewayErrors(t *testing.T) {
	for _, status := range []int{502, 503, 504, 500, 429, 400} {
		for _, o := range ops {
			t.Run(http.StatusText(status)+"/"+o.name, func(t *testing.T) {
				var requests atomic.Int64
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if requests.Add(1) == 1 {
						w.Header().Set("X-Request-Id", "req_gw")
						http.Error(w, "<html>upstream trouble</html>", status)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, fakeBodies[r.URL.Path])
				}))
				t.Cleanup(srv.Close)
				c := newClient(t, srv.URL, client.WithRetry(fastRetry))
				err := o.call(context.Background(), c, "n")
				retried := !o.counting && (status == 502 || status == 503 || status == 504)
				if retried {
					if err != nil || requests.Load() != 2 {
						t.Errorf("error %v after %d requests; want success on the second", err, requests.Load())
					}
					return
				}
				var e *client.APIError
				if !errors.As(err, &e) || e.Status != status || requests.Load() != 1 {
					t.Fatalf("error %v after %d requests; want an *APIError %d after 1", err, requests.Load(), status)
				}
				if e.Type != "" || e.RequestID != "req_gw" || e.Detail != "<html>upstream trouble</html>" {
					t.Errorf("a proxy's answer as %+v, want no type, the header's request id and the body as detail", e)
				}
			})
		}
	}
}

func TestRetriesStopAtTheDeadline(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	slow := client.RetryPolicy{MaxAttempts: 5, BaseDelay: time.Second, MaxDelay: time.Second}
	c := newClient(t, srv.URL, client.WithRetry(slow))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.GetOverride(ctx, "n", "o")
	var e *client.APIError
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("error %v, want the last answer, a 503", err)
	}
	// The first backoff (0.5 to 1 s) would end after the deadline: the
	// client gives up at once rather than sleep into it.
	if took := time.Since(start); took > 200*time.Millisecond || requests.Load() != 1 {
		t.Errorf("gave up after %v and %d requests, want at once after 1", took, requests.Load())
	}
}
