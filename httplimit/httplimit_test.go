package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/httplimit"
)

// backend makes a Limiter of one kind for a test.
type backend struct {
	name string
	new  func(t *testing.T) httplimit.Limiter
}

var backends = []backend{
	{"embedded", func(t *testing.T) httplimit.Limiter {
		l, err := sluice.New(sluice.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return httplimit.Embedded(l)
	}},
	{"remote", func(t *testing.T) httplimit.Limiter {
		c, err := client.New(shared.URL, rootKey)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.CloseIdleConnections)
		return httplimit.Remote(c)
	}},
}

// policyName is a policy name (so a namespace) of the test's own.
func policyName(t *testing.T) string {
	return strings.ReplaceAll(t.Name(), "/", ".")
}

// send serves one request of h from the client at remoteAddr.
func send(h http.Handler, path, remoteAddr string, header http.Header) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = remoteAddr
	for k, vs := range header {
		r.Header[k] = vs
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// ok answers "ok" and records the decision it was given.
func ok(got *httplimit.Result) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got != nil {
			*got, _ = httplimit.FromContext(r.Context())
		}
		_, _ = io.WriteString(w, "ok")
	})
}

var rateLimitField = regexp.MustCompile(`^"([^"\\]*)";r=(\d+);t=(\d+)$`)

// fields returns r and t of a RateLimit field, failing unless its policy
// is name.
func fields(t *testing.T, field, name string) (r, secs int64) {
	t.Helper()
	m := rateLimitField.FindStringSubmatch(field)
	if m == nil || m[1] != name {
		t.Fatalf("RateLimit %q is not the draft's form for policy %q", field, name)
	}
	r, _ = strconv.ParseInt(m[2], 10, 64)
	secs, _ = strconv.ParseInt(m[3], 10, 64)
	return r, secs
}

func TestLimitsWithTheDraftsFields(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			name := policyName(t)
			mw, err := httplimit.New(httplimit.Config{Limiter: b.new(t), Policy: httplimit.Policy{Name: name, Limit: 3, Window: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			var seen httplimit.Result
			h := mw.Wrap(ok(&seen))
			steps := []struct {
				name          string
				client        string
				wantStatus    int
				wantRemaining int64
			}{
				{"first", "192.0.2.1:1000", 200, 2},
				{"second", "192.0.2.1:1001", 200, 1},
				{"last", "192.0.2.1:1002", 200, 0},
				{"over", "192.0.2.1:1003", 429, 0},
				{"another client", "192.0.2.2:1000", 200, 2},
			}
			for _, s := range steps {
				seen = httplimit.Result{}
				w := send(h, "/", s.client, nil)
				if w.Code != s.wantStatus {
					t.Fatalf("%s: status %d, want %d", s.name, w.Code, s.wantStatus)
				}
				if got, want := w.Header().Get("RateLimit-Policy"), fmt.Sprintf("%q;q=3;w=60", name); got != want {
					t.Errorf("%s: RateLimit-Policy %q, want %q", s.name, got, want)
				}
				r, secs := fields(t, w.Header().Get("RateLimit"), name)
				if r != s.wantRemaining || secs < 1 || secs > 60 {
					t.Errorf("%s: RateLimit r=%d t=%d, want r=%d and t in 1..60", s.name, r, secs, s.wantRemaining)
				}
				retry := w.Header().Get("Retry-After")
				if s.wantStatus == 200 {
					if retry != "" || seen.Decision.Remaining != s.wantRemaining || !seen.Decision.Allowed {
						t.Errorf("%s: Retry-After %q, handler saw %+v", s.name, retry, seen)
					}
					continue
				}
				if n, err := strconv.ParseInt(retry, 10, 64); err != nil || n < secs || n > secs+60 {
					t.Errorf("%s: Retry-After %q, want delta-seconds from t=%d to t+60", s.name, retry, secs)
				}
				if seen.Policy.Name != "" || w.Body.String() != "Too Many Requests\n" {
					t.Errorf("%s: the denied request reached the handler, or body %q", s.name, w.Body)
				}
			}
		})
	}
}

func TestPolicyPerRoute(t *testing.T) {
	policies := map[string]httplimit.Policy{
		"/login": {Name: "login", Limit: 1, Window: time.Minute},
		"/api":   {Name: "api", Limit: 5, Window: time.Minute},
	}
	mw, err := httplimit.New(httplimit.Config{
		Limiter: backends[0].new(t),
		PolicyFunc: func(r *http.Request) (httplimit.Policy, bool) {
			p, ok := policies[r.URL.Path]
			return p, ok
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(ok(nil))
	steps := []struct {
		path       string
		wantStatus int
		wantField  string // RateLimit; "" for none
	}{
		{"/login", 200, `"login";r=0;t=`},
		{"/login", 429, `"login";r=0;t=`},
		{"/api", 200, `"api";r=4;t=`}, // its own counter
		{"/healthz", 200, ""},         // not limited
		{"/healthz", 200, ""},
	}
	for i, s := range steps {
		w := send(h, s.path, "192.0.2.1:1000", nil)
		got := w.Header().Get("RateLimit")
		if w.Code != s.wantStatus || (s.wantField == "") != (got == "") || !strings.HasPrefix(got, s.wantField) {
			t.Errorf("step %d %s: status %d, RateLimit %q; want %d, %q…", i, s.path, w.Code, got, s.wantStatus, s.wantField)
		}
	}
}

func TestCost(t *testing.T) {
	mw, err := httplimit.New(httplimit.Config{
		Limiter: backends[0].new(t),
		Policy:  httplimit.Policy{Limit: 10, Window: time.Minute},
		Cost: func(r *http.Request) int64 {
			n, _ := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
			return n
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(ok(nil))
	steps := []struct {
		name       string
		cost       string
		wantStatus int
		wantR      int64
	}{
		{"spends 4", "4", 200, 6},
		{"7 is more than is left", "7", 429, 6},
		{"a denial spent nothing", "6", 200, 0},
	}
	for _, s := range steps {
		w := send(h, "/", "192.0.2.1:1000", http.Header{"X-Cost": {s.cost}})
		r, _ := fields(t, w.Header().Get("RateLimit"), "default")
		if w.Code != s.wantStatus || r != s.wantR {
			t.Errorf("%s: status %d, r=%d; want %d, r=%d", s.name, w.Code, r, s.wantStatus, s.wantR)
		}
	}
}

func TestRefusesARequestWithoutKey(t *testing.T) {
	tests := []struct {
		name   string
		key    httplimit.KeyFunc
		remote string
	}{
		{"missing header", httplimit.Header("X-API-Key"), "192.0.2.1:1000"},
		{"peer without an IP address", nil, "@"},
		{"empty key", func(*http.Request) (string, error) { return "", nil }, "192.0.2.1:1000"},
	}
	for _, tt := range tests {
		for _, failClosed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fail closed %v", tt.name, failClosed), func(t *testing.T) {
				var decided, served atomic.Int64
				var reported error
				mw, err := httplimit.New(httplimit.Config{
					Limiter: httplimit.LimiterFunc(func(context.Context, httplimit.Request) (httplimit.Decision, error) {
						decided.Add(1)
						return httplimit.Decision{Allowed: true}, nil
					}),
					Policy:     httplimit.Policy{Limit: 1, Window: time.Minute},
					Key:        tt.key,
					FailClosed: failClosed,
					OnError:    func(_ *http.Request, err error) { reported = err },
				})
				if err != nil {
					t.Fatal(err)
				}
				w := send(mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) })), "/", tt.remote, nil)
				if w.Code != http.StatusBadRequest || decided.Load() != 0 || served.Load() != 0 {
					t.Errorf("status %d, %d decisions, %d served; want 400 and neither", w.Code, decided.Load(), served.Load())
				}
				if !errors.Is(reported, httplimit.ErrNoKey) {
					t.Errorf("OnError got %v, want ErrNoKey", reported)
				}
			})
		}
	}
}

var errLimiter = errors.New("limiter down")

func TestLimiterFailure(t *testing.T) {
	failing := httplimit.LimiterFunc(func(context.Context, httplimit.Request) (httplimit.Decision, error) {
		return httplimit.Decision{}, errLimiter
	})
	unreachable, err := client.New("http://"+refusedAddr(t), rootKey, client.WithRetry(client.RetryPolicy{MaxAttempts: 1, BaseDelay: 1, MaxDelay: 1}))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		limiter httplimit.Limiter
		policy  func(*http.Request) (httplimit.Policy, bool)
		wantErr error
	}{
		{"limiter error", failing, nil, errLimiter},
		{"server unreachable", httplimit.Remote(unreachable), nil, nil},
		{"invalid policy from PolicyFunc", failing, func(*http.Request) (httplimit.Policy, bool) {
			return httplimit.Policy{Limit: -1, Window: time.Minute}, true
		}, httplimit.ErrInvalidPolicy},
	}
	for _, tt := range tests {
		for _, failClosed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fail closed %v", tt.name, failClosed), func(t *testing.T) {
				var reported error
				mw, err := httplimit.New(httplimit.Config{
					Limiter: tt.limiter, Policy: httplimit.Policy{Limit: 1, Window: time.Minute}, PolicyFunc: tt.policy,
					FailClosed: failClosed, OnError: func(_ *http.Request, err error) { reported = err },
				})
				if err != nil {
					t.Fatal(err)
				}
				w := send(mw.Wrap(ok(nil)), "/", "192.0.2.1:1000", nil)
				want := map[bool]int{false: 200, true: 503}[failClosed]
				if w.Code != want || w.Header().Get("RateLimit") != "" {
					t.Errorf("status %d, RateLimit %q; want %d and no field", w.Code, w.Header().Get("RateLimit"), want)
				}
				if reported == nil || (tt.wantErr != nil && !errors.Is(reported, tt.wantErr)) || !strings.HasPrefix(reported.Error(), "httplimit: ") {
					t.Errorf("OnError got %v, want an httplimit error wrapping %v", reported, tt.wantErr)
				}
			})
		}
	}
}

func TestDeniedHandler(t *testing.T) {
	mw, err := httplimit.New(httplimit.Config{
		Limiter: backends[0].new(t),
		Policy:  httplimit.Policy{Limit: 0, Window: time.Minute},
		Denied: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, _ := httplimit.FromContext(r.Context())
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_ = json.NewEncoder(w).Encode(map[string]any{"retryAfterSeconds": res.RetryAfter().Seconds()})
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	w := send(mw.Wrap(ok(nil)), "/", "192.0.2.1:1000", nil)
	var body struct{ RetryAfterSeconds float64 }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 429 {
		t.Fatalf("status %d, body %q: %v", w.Code, w.Body, err)
	}
	if got := strconv.FormatFloat(body.RetryAfterSeconds, 'f', -1, 64); got != w.Header().Get("Retry-After") || w.Header().Get("RateLimit") == "" {
		t.Errorf("body says %s s, Retry-After %q, RateLimit %q", got, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
	}
}

// TestRemoteAppliesTheServersOverride: an override set on the server for
// the policy's namespace replaces its limit, and the fields say so.
func TestRemoteAppliesTheServersOverride(t *testing.T) {
	name := policyName(t)
	c, err := client.New(shared.URL, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	if _, err := c.SetOverride(context.Background(), name, client.Override{Identifier: "192.0.2.9", Limit: 1, Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Config{Limiter: httplimit.Remote(c), Policy: httplimit.Policy{Name: name, Limit: 100, Window: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(ok(nil))
	for i, want := range []int{200, 429} {
		w := send(h, "/", "192.0.2.9:1000", nil)
		if got := w.Header().Get("RateLimit-Policy"); w.Code != want || got != fmt.Sprintf("%q;q=1;w=60", name) {
			t.Errorf("request %d: status %d, RateLimit-Policy %q; want %d under q=1", i, w.Code, got, want)
		}
	}
	if w := send(h, "/", "192.0.2.10:1000", nil); !strings.Contains(w.Header().Get("RateLimit-Policy"), ";q=100;") {
		t.Errorf("another client: RateLimit-Policy %q, want q=100", w.Header().Get("RateLimit-Policy"))
	}
}

func TestNewRefuses(t *testing.T) {
	limiter := backends[0].new(t)
	tests := []struct {
		name string
		cfg  httplimit.Config
		want error
	}{
		{"no limiter", httplimit.Config{Policy: httplimit.Policy{Limit: 1, Window: time.Second}}, httplimit.ErrInvalidConfig},
		{"no window", httplimit.Config{Limiter: limiter, Policy: httplimit.Policy{Limit: 1}}, httplimit.ErrInvalidPolicy},
		{"negative limit", httplimit.Config{Limiter: limiter, Policy: httplimit.Policy{Limit: -1, Window: time.Second}}, httplimit.ErrInvalidPolicy},
		{"name not ASCII", httplimit.Config{Limiter: limiter, Policy: httplimit.Policy{Name: "café", Limit: 1, Window: time.Second}}, httplimit.ErrInvalidPolicy},
		{"name with a newline", httplimit.Config{Limiter: limiter, Policy: httplimit.Policy{Name: "a\nb", Limit: 1, Window: time.Second}}, httplimit.ErrInvalidPolicy},
		{"name too long", httplimit.Config{Limiter: limiter, Policy: httplimit.Policy{Name: strings.Repeat("a", 513), Limit: 1, Window: time.Second}}, httplimit.ErrInvalidPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := httplimit.New(tt.cfg); !errors.Is(err, tt.want) {
				t.Errorf("New = %v, want %v", err, tt.want)
			}
		})
	}
}
