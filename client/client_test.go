package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/servetest"
	"github.com/sluicehq/sluice/internal/testpki"
)

func TestLimit(t *testing.T) {
	c := newClient(t, shared.URL)
	ns := namespace(t)
	steps := []struct {
		name          string
		cost          int64
		wantSuccess   bool
		wantRemaining int64
	}{
		{"first unit", 1, true, 2},
		{"peek counts nothing", 0, true, 2},
		{"two more", 2, true, 0},
		{"over the limit is denied, not an error", 1, false, 0},
		{"a denial counted nothing", 0, true, 0},
	}
	for _, s := range steps {
		before := time.Now()
		res, err := c.Limit(context.Background(), client.LimitRequest{
			Namespace: ns, Identifier: "user-42", Limit: 3, Duration: time.Minute, Cost: s.cost,
		})
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if res.Success != s.wantSuccess || res.Remaining != s.wantRemaining || res.Limit != 3 {
			t.Errorf("%s: got %+v, want success %v, remaining %d, limit 3", s.name, res, s.wantSuccess, s.wantRemaining)
		}
		if !strings.HasPrefix(res.RequestID, "req_") {
			t.Errorf("%s: request id %q", s.name, res.RequestID)
		}
		if res.Reset.Before(before.Add(-time.Second)) || res.Reset.After(before.Add(time.Minute+time.Second)) {
			t.Errorf("%s: reset %v is not within the minute after %v", s.name, res.Reset, before)
		}
	}
}

func TestMultiLimitIsAllOrNothing(t *testing.T) {
	c := newClient(t, shared.URL)
	ns := namespace(t)
	ctx := context.Background()
	reqs := []client.LimitRequest{
		{Namespace: ns, Identifier: "a", Limit: 5, Duration: time.Minute, Cost: 1},
		{Namespace: ns, Identifier: "b", Limit: 1, Duration: time.Minute, Cost: 2}, // cannot pass
	}
	res, err := c.MultiLimit(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Passed || len(res.Checks) != 2 || !res.Checks[0].Passed || res.Checks[1].Passed {
		t.Fatalf("got %+v, want the first check passed, the second denied, the call not passed", res)
	}
	if res.Checks[0].Namespace != ns || res.Checks[1].Identifier != "b" {
		t.Errorf("checks do not echo the requests: %+v", res.Checks)
	}
	peek, err := c.Limit(ctx, client.LimitRequest{Namespace: ns, Identifier: "a", Limit: 5, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if peek.Remaining != 5 {
		t.Errorf("after a call that did not pass, a has %d remaining, want 5 (nothing counted)", peek.Remaining)
	}
}

// TestReport reports usage after the fact between limit calls on one
// counter of a real server: a report is never denied, counts its whole
// cost past the limit and answers what remains after it; the limit call
// after it is denied; MultiReport counts every report of the call.
func TestReport(t *testing.T) {
	c := newClient(t, shared.URL)
	ns := namespace(t)
	ctx := context.Background()
	r := client.LimitRequest{Namespace: ns, Identifier: "team-7", Limit: 1000, Duration: time.Minute}
	steps := []struct {
		name          string
		report        bool
		cost          int64
		wantSuccess   bool
		wantRemaining int64
	}{
		{"a check of one token", false, 1, true, 999},
		{"the answer's 700 tokens", true, 700, true, 299},
		{"the next answer's 900 tokens, past the budget", true, 900, true, 0},
		{"the next check is denied", false, 1, false, 0},
		{"a report on a spent budget still counts", true, 10, true, 0},
	}
	for _, s := range steps {
		r.Cost = s.cost
		call := c.Limit
		if s.report {
			call = c.Report
		}
		res, err := call(ctx, r)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if res.Success != s.wantSuccess || res.Remaining != s.wantRemaining || res.Limit != 1000 || !strings.HasPrefix(res.RequestID, "req_") {
			t.Errorf("%s: got %+v, want success %v, remaining %d", s.name, res, s.wantSuccess, s.wantRemaining)
		}
	}
	r.Identifier, r.Cost = "team-8", 600
	res, err := c.MultiReport(ctx, []client.LimitRequest{r, r})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Passed || len(res.Checks) != 2 || res.Checks[0].Remaining != 400 || res.Checks[1].Remaining != 0 || !res.Checks[1].Passed {
		t.Fatalf("MultiReport: %+v; want both counted, 400 then 0 remaining", res)
	}
}

func TestOverrides(t *testing.T) {
	c := newClient(t, shared.URL)
	ns := namespace(t)
	ctx := context.Background()
	set, err := c.SetOverride(ctx, ns, client.Override{Identifier: "premium_*", Limit: 1000, Duration: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(set.ID, "rlor_") {
		t.Fatalf("override id %q", set.ID)
	}
	got, err := c.GetOverride(ctx, ns, "premium_*")
	if err != nil || got != set {
		t.Fatalf("GetOverride = %+v, %v; want %+v", got, err, set)
	}
	res, err := c.Limit(ctx, client.LimitRequest{Namespace: ns, Identifier: "premium_7", Limit: 10, Duration: time.Minute, Cost: 1})
	if err != nil || res.OverrideID != set.ID || res.Limit != 1000 || res.Remaining != 999 {
		t.Fatalf("Limit under the override = %+v, %v", res, err)
	}
	again, err := c.SetOverride(ctx, ns, client.Override{Identifier: "premium_*", Limit: 5, Duration: time.Minute})
	if err != nil || again.ID != set.ID {
		t.Fatalf("setting it again = %+v, %v; want the same id %s", again, err, set.ID)
	}
	if err := c.DeleteOverride(ctx, ns, "premium_*"); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"get after delete":    func() error { _, err := c.GetOverride(ctx, ns, "premium_*"); return err }(),
		"delete after delete": c.DeleteOverride(ctx, ns, "premium_*"),
	} {
		var e *client.APIError
		if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &e) || e.Type != client.TypeOverrideNotFound {
			t.Errorf("%s: %v, want a 404 %s", name, err, client.TypeOverrideNotFound)
		}
	}
}

func TestListOverridesWalksEveryPage(t *testing.T) {
	const total = 105 // more than one page of the default size, 100
	ns := namespace(t)
	ctx := context.Background()
	setup := newClient(t, shared.URL)
	want := make([]string, total)
	for i := range total {
		want[i] = fmt.Sprintf("id-%03d", i)
		if _, err := setup.SetOverride(ctx, ns, client.Override{Identifier: want[i], Limit: int64(i), Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		pageSize  int // 0: the default
		stopAfter int // 0: the whole list
		wantCalls int
	}{
		{"default page size", 0, 0, 2},
		{"pages of 10", 10, 0, 11},
		{"pages of 1", 1, 0, total},
		{"a break stops fetching", 10, 15, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []client.Option
			if tt.pageSize > 0 {
				opts = append(opts, client.WithPageSize(tt.pageSize))
			}
			calls := 0
			c := newClient(t, shared.URL, opts...)
			ctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { calls++ }})
			var got []string
			for o, err := range c.ListOverrides(ctx, ns) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, o.Identifier)
				if o.Duration != time.Minute || o.Limit != int64(len(got)-1) || !strings.HasPrefix(o.ID, "rlor_") {
					t.Fatalf("override %d: %+v", len(got)-1, o)
				}
				if len(got) == tt.stopAfter {
					break
				}
			}
			wantIDs := want
			if tt.stopAfter > 0 {
				wantIDs = want[:tt.stopAfter]
			}
			if strings.Join(got, ",") != strings.Join(wantIDs, ",") {
				t.Errorf("got %d overrides %v, want %d in order", len(got), got, len(wantIDs))
			}
			if calls != tt.wantCalls {
				t.Errorf("%d calls, want %d", calls, tt.wantCalls)
			}
		})
	}
}

func TestListOverridesPage(t *testing.T) {
	c := newClient(t, shared.URL)
	ns := namespace(t)
	ctx := context.Background()
	for _, id := range []string{"c", "a", "b"} {
		if _, err := c.SetOverride(ctx, ns, client.Override{Identifier: id, Limit: 1, Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := c.ListOverridesPage(ctx, ns, "", 2)
	if err != nil || len(first.Overrides) != 2 || first.Overrides[0].Identifier != "a" || !first.HasMore || first.Cursor == "" {
		t.Fatalf("first page = %+v, %v", first, err)
	}
	last, err := c.ListOverridesPage(ctx, ns, first.Cursor, 2)
	if err != nil || len(last.Overrides) != 1 || last.Overrides[0].Identifier != "c" || last.HasMore {
		t.Fatalf("last page = %+v, %v", last, err)
	}
}

func TestAPIErrors(t *testing.T) {
	ctx := context.Background()
	limit := client.LimitRequest{Namespace: namespace(t), Identifier: "x", Limit: 1, Duration: time.Minute, Cost: 1}
	tests := []struct {
		name         string
		key, prefix  string
		call         func(c *client.Client) error
		wantStatus   int
		wantType     string
		wantLocation string // of the first field error, for a 400
		wantIs       error  // a sentinel the error matches, or nil for none
	}{
		{"unknown root key", "wrong-key", "", func(c *client.Client) error { _, err := c.Limit(ctx, limit); return err },
			401, client.TypeKeyNotFound, "", client.ErrUnauthorized},
		{"invalid request", rootKey, "", func(c *client.Client) error {
			bad := limit
			bad.Duration = 10 * time.Millisecond
			_, err := c.Limit(ctx, bad)
			return err
		}, 400, client.TypeInvalidInput, "body.duration", nil},
		{"unknown namespace", rootKey, "", func(c *client.Client) error { _, err := c.GetOverride(ctx, "no-such-namespace", "x"); return err },
			404, client.TypeNamespaceNotFound, "", client.ErrNotFound},
		{"wrong base path", rootKey, "/nope", func(c *client.Client) error { _, err := c.Limit(ctx, limit); return err },
			404, client.TypeRouteNotFound, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := client.New(shared.URL+tt.prefix, tt.key)
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseIdleConnections()
			err = tt.call(c)
			var e *client.APIError
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *APIError", err, err)
			}
			if e.Status != tt.wantStatus || e.Type != tt.wantType || !strings.HasPrefix(e.RequestID, "req_") || e.Detail == "" {
				t.Errorf("got %+v, want status %d, type %s, a request id and a detail", e, tt.wantStatus, tt.wantType)
			}
			if tt.wantLocation != "" && (len(e.Errors) == 0 || e.Errors[0].Location != tt.wantLocation) {
				t.Errorf("field errors %+v, want one at %s", e.Errors, tt.wantLocation)
			}
			for _, sentinel := range []error{client.ErrNotFound, client.ErrUnauthorized} {
				if got := errors.Is(err, sentinel); got != errors.Is(tt.wantIs, sentinel) {
					t.Errorf("errors.Is(err, %v) = %v", sentinel, got)
				}
			}
			if !strings.Contains(err.Error(), e.RequestID) || !strings.HasPrefix(err.Error(), "client: ") {
				t.Errorf("message %q does not start with the package or lacks the request id", err)
			}
		})
	}
}

// hangingListener accepts connections and never answers; it is closed when
// the test ends.
func hangingListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "http://" + ln.Addr().String()
}

func TestDeadlines(t *testing.T) {
	url := hangingListener(t)
	tests := []struct {
		name    string
		timeout time.Duration // WithTimeout
		ctx     time.Duration // the context's deadline; 0: none
		call    func(context.Context, *client.Client) error
	}{
		{"context deadline, Limit", time.Minute, 200 * time.Millisecond, func(ctx context.Context, c *client.Client) error {
			_, err := c.Limit(ctx, client.LimitRequest{Namespace: "n", Identifier: "i", Limit: 1, Duration: time.Minute, Cost: 1})
			return err
		}},
		{"context deadline, a retried read", time.Minute, 200 * time.Millisecond, func(ctx context.Context, c *client.Client) error {
			_, err := c.GetOverride(ctx, "n", "i")
			return err
		}},
		{"client timeout, no context deadline", 200 * time.Millisecond, 0, func(ctx context.Context, c *client.Client) error {
			_, err := c.GetOverride(ctx, "n", "i")
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, url, client.WithTimeout(tt.timeout))
			ctx := context.Background()
			if tt.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctx)
				defer cancel()
			}
			start := time.Now()
			err := tt.call(ctx, c)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v, want one wrapping context.DeadlineExceeded", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("returned after %v, want about 200ms", took)
			}
		})
	}
}

// TestTLSHTTP2AndConnectionReuse checks the default transport against a
// server speaking TLS: HTTP/2 is negotiated and later calls reuse the
// connection.
func TestTLSHTTP2AndConnectionReuse(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "client test CA")
	cert, key := ca.Server(t, "sluice").Files(t, dir, "server")
	srv := servetest.Start(t, binary, "--root-key", rootKey+":acme", "--tls-cert", cert, "--tls-key", key)
	c := newClient(t, srv.URL, client.WithTLSConfig(&tls.Config{RootCAs: ca.Pool()}))
	var (
		protocols []string
		reused    []bool
	)
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if tc, ok := info.Conn.(*tls.Conn); ok {
			protocols = append(protocols, tc.ConnectionState().NegotiatedProtocol)
		}
		reused = append(reused, info.Reused)
	}})
	for range 3 {
		if _, err := c.Limit(ctx, client.LimitRequest{Namespace: namespace(t), Identifier: "x", Limit: 10, Duration: time.Minute, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(protocols) != "[h2 h2 h2]" || fmt.Sprint(reused) != "[false true true]" {
		t.Errorf("protocols %v, reused %v; want h2 on one connection reused", protocols, reused)
	}
}

func TestNewRefuses(t *testing.T) {
	tests := []struct {
		name, url, key string
		opts           []client.Option
	}{
		{"no scheme", "127.0.0.1:7070", "k", nil},
		{"ftp", "ftp://h", "k", nil},
		{"no host", "http://", "k", nil},
		{"query", "http://h/?a=1", "k", nil},
		{"user", "http://u:p@h", "k", nil},
		{"empty key", "http://h", "", nil},
		{"key with a space", "http://h", "a b", nil},
		{"key with a newline", "http://h", "a\nb", nil},
		{"negative timeout", "http://h", "k", []client.Option{client.WithTimeout(-1)}},
		{"page size 0", "http://h", "k", []client.Option{client.WithPageSize(0)}},
		{"page size 101", "http://h", "k", []client.Option{client.WithPageSize(101)}},
		{"no attempt", "http://h", "k", []client.Option{client.WithRetry(client.RetryPolicy{MaxAttempts: 0, BaseDelay: 1, MaxDelay: 1})}},
		{"max delay under base", "http://h", "k", []client.Option{client.WithRetry(client.RetryPolicy{MaxAttempts: 2, BaseDelay: 2, MaxDelay: 1})}},
		{"TLS config and HTTP client", "https://h", "k", []client.Option{client.WithTLSConfig(&tls.Config{}), client.WithHTTPClient(&http.Client{})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := client.New(tt.url, tt.key, tt.opts...); !errors.Is(err, client.ErrInvalidConfig) {
				t.Errorf("New(%q, %q) = %v, want ErrInvalidConfig", tt.url, tt.key, err)
			}
		})
	}
}
