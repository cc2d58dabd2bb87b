package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/analytics"
	"github.com/sluicehq/sluice/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newTestServer builds a server over a real limiter and a SQLite store.
func newTestServer(t testing.TB, keys ...RootKey) *Server {
	t.Helper()
	return newServerWith(t, Config{RootKeys: keys})
}

// newServerWith builds a server from cfg, filling in a real limiter, a
// catalog over an in-memory store and metrics.
func newServerWith(t testing.TB, cfg Config) *Server {
	t.Helper()
	return newServerOver(t, newMemStore(), cfg)
}

// noAnalytics, as Config.Analytics of newServerWith, builds a server
// without analytics; nil gives it a recorder.
type noAnalytics struct{ Analytics }

// newServerOver is newServerWith over the store st.
func newServerOver(t testing.TB, st store.Store, cfg Config) *Server {
	t.Helper()
	ctx := context.Background()
	cache, err := store.NewCache(ctx, store.CacheConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := sluice.New(sluice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg.Limiter, cfg.Catalog, cfg.Metrics, cfg.Gatherer = lim, cache, NewMetrics(reg), reg
	switch cfg.Analytics.(type) {
	case nil:
		rec, err := analytics.New(analytics.Config{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Analytics = rec
	case noAnalytics:
		cfg.Analytics = nil
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		lim.Close()
		cache.Close()
		st.Close()
	})
	return s
}

type reply struct {
	code int
	body map[string]any
	raw  string
	ct   string
}

func do(t testing.TB, h http.Handler, method, path, auth, ct, body string) reply {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	r := reply{code: rec.Code, raw: rec.Body.String(), ct: rec.Header().Get("Content-Type")}
	_ = json.Unmarshal(rec.Body.Bytes(), &r.body)
	return r
}

func (r reply) requestID() string {
	m, _ := r.body["meta"].(map[string]any)
	id, _ := m["requestId"].(string)
	return id
}

func (r reply) errorLocations() []string {
	e, _ := r.body["error"].(map[string]any)
	list, _ := e["errors"].([]any)
	var out []string
	for _, x := range list {
		m, _ := x.(map[string]any)
		out = append(out, m["location"].(string)+": "+m["message"].(string))
	}
	return out
}

func TestLimitMalformed(t *testing.T) {
	h := newTestServer(t).Handler()
	const ok = `"namespace":"n","identifier":"i","limit":1,"duration":60000`
	for _, tc := range []struct {
		name, body string
		code       int
		want       string // substring of the first error location+message
	}{
		{"valid", `{` + ok + `}`, 200, ""},
		{"valid with cost 0", `{` + ok + `,"cost":0}`, 200, ""},
		{"empty body", ``, 400, "body: is not valid JSON"},
		{"not an object", `[]`, 400, "body: must be a JSON object"},
		{"null", `null`, 400, "body: must be a JSON object"},
		{"truncated", `{"namespace":"n"`, 400, "body: is not valid JSON"},
		{"trailing data", `{` + ok + `} {}`, 400, "has data after"},
		{"trailing garbage", `{` + ok + `}x`, 400, "body"},
		{"unknown field", `{` + ok + `,"async":true}`, 400, "body.async: is not a known field"},
		{"wrong case field", `{` + ok + `,"Limit":1}`, 400, "body.Limit: is not a known field"},
		{"duplicate field", `{` + ok + `,"limit":2}`, 400, "body.limit: appears more than once"},
		{"missing namespace", `{"identifier":"i","limit":1,"duration":60000}`, 400, "body.namespace: is required"},
		{"missing limit", `{"namespace":"n","identifier":"i","duration":60000}`, 400, "body.limit: is required"},
		{"missing duration", `{"namespace":"n","identifier":"i","limit":1}`, 400, "body.duration: is required"},
		{"empty identifier", `{"namespace":"n","identifier":"","limit":1,"duration":60000}`, 400, "body.identifier: must not be empty"},
		{"long identifier", `{"namespace":"n","identifier":"` + strings.Repeat("a", 513) + `","limit":1,"duration":60000}`, 400, "is 513 bytes long"},
		{"512 bytes ok", `{"namespace":"n","identifier":"` + strings.Repeat("a", 512) + `","limit":1,"duration":60000}`, 200, ""},
		{"control character", `{"namespace":"n","identifier":"a\u0000b","limit":1,"duration":60000}`, 400, "non-printable"},
		{"raw tab", "{\"namespace\":\"n\",\"identifier\":\"a\\tb\",\"limit\":1,\"duration\":60000}", 400, "non-printable"},
		{"invalid utf-8", "{\"namespace\":\"n\",\"identifier\":\"a\xffb\",\"limit\":1,\"duration\":60000}", 400, "not valid UTF-8"},
		{"lone surrogate", `{"namespace":"n","identifier":"a\ud800b","limit":1,"duration":60000}`, 400, "surrogate"},
		{"escaped replacement char ok", `{"namespace":"n","identifier":"a\ufffdb","limit":1,"duration":60000}`, 200, ""},
		{"identifier number", `{"namespace":"n","identifier":1,"limit":1,"duration":60000}`, 400, "must be a string"},
		{"limit string", `{"namespace":"n","identifier":"i","limit":"1","duration":60000}`, 400, "body.limit: must be an integer"},
		{"limit null", `{"namespace":"n","identifier":"i","limit":null,"duration":60000}`, 400, "body.limit: must be an integer"},
		{"limit fraction", `{"namespace":"n","identifier":"i","limit":1.5,"duration":60000}`, 400, "without fraction"},
		{"limit exponent", `{"namespace":"n","identifier":"i","limit":1e3,"duration":60000}`, 400, "without fraction"},
		{"limit negative", `{"namespace":"n","identifier":"i","limit":-1,"duration":60000}`, 400, "must be between 0"},
		{"limit 2^53-1 ok", `{"namespace":"n","identifier":"i","limit":9007199254740991,"duration":60000}`, 200, ""},
		{"limit 2^53", `{"namespace":"n","identifier":"i","limit":9007199254740992,"duration":60000}`, 400, "safe integer"},
		{"limit beyond int64", `{"namespace":"n","identifier":"i","limit":99999999999999999999999,"duration":60000}`, 400, "safe integer"},
		{"duration too short", `{"namespace":"n","identifier":"i","limit":1,"duration":999}`, 400, "body.duration"},
		{"duration too long", `{"namespace":"n","identifier":"i","limit":1,"duration":2592000001}`, 400, "body.duration"},
		{"duration max ok", `{"namespace":"n","identifier":"i","limit":1,"duration":2592000000}`, 200, ""},
		{"cost negative", `{` + ok + `,"cost":-1}`, 400, "body.cost"},
	} {
		for _, path := range []string{"/v2/ratelimit.limit", "/v2/ratelimit.report"} { // one body, one validation
			t.Run(path[4:]+"/"+tc.name, func(t *testing.T) {
				r := do(t, h, "POST", path, "Bearer k", "application/json", tc.body)
				if r.code != tc.code {
					t.Fatalf("status %d, want %d: %s", r.code, tc.code, r.raw)
				}
				if r.requestID() == "" || r.ct != "application/json" {
					t.Fatalf("no requestId or wrong content type %q: %s", r.ct, r.raw)
				}
				if tc.want == "" {
					return
				}
				locs := r.errorLocations()
				if len(locs) == 0 || !strings.Contains(strings.Join(locs, "\n"), tc.want) {
					t.Fatalf("errors %q do not mention %q", locs, tc.want)
				}
			})
		}
	}
}

func TestMultiLimitMalformed(t *testing.T) {
	h := newTestServer(t).Handler()
	check := `{"namespace":"n","identifier":"i","limit":10,"duration":60000}`
	for _, tc := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"one", `[` + check + `]`, 200, ""},
		{"empty array", `[]`, 400, "between 1 and 100"},
		{"object", check, 400, "must be a JSON array"},
		{"101 checks", `[` + strings.TrimSuffix(strings.Repeat(check+",", 101), ",") + `]`, 400, "between 1 and 100"},
		{"100 checks ok", `[` + strings.TrimSuffix(strings.Repeat(check+",", 100), ",") + `]`, 200, ""},
		{"bad element located", `[` + check + `,{"namespace":"n"}]`, 400, "body[1].identifier: is required"},
		{"trailing", `[` + check + `]]`, 400, "body"},
	} {
		for _, path := range []string{"/v2/ratelimit.multiLimit", "/v2/ratelimit.multiReport"} {
			t.Run(path[4:]+"/"+tc.name, func(t *testing.T) {
				r := do(t, h, "POST", path, "Bearer k", "application/json", tc.body)
				if r.code != tc.code {
					t.Fatalf("status %d, want %d: %s", r.code, tc.code, r.raw)
				}
				if tc.want != "" && !strings.Contains(strings.Join(r.errorLocations(), "\n"), tc.want) {
					t.Fatalf("errors %q do not mention %q", r.errorLocations(), tc.want)
				}
			})
		}
	}
}

func TestTransportErrors(t *testing.T) {
	h := newTestServer(t, RootKey{Key: "transport-key-0001", Workspace: "acme"}).Handler()
	body := `{"namespace":"n","identifier":"i","limit":1,"duration":60000}`
	for _, tc := range []struct {
		name, method, path, auth, ct, body string
		code                               int
	}{
		{"ok", "POST", "/v2/ratelimit.limit", "Bearer transport-key-0001", "application/json", body, 200},
		{"ok lowercase bearer and charset", "POST", "/v2/ratelimit.limit", "bearer transport-key-0001", "application/json; charset=utf-8", body, 200},
		{"no auth", "POST", "/v2/ratelimit.limit", "", "application/json", body, 401},
		{"unknown key", "POST", "/v2/ratelimit.limit", "Bearer transport-key-0002", "application/json", body, 401},
		{"basic auth", "POST", "/v2/ratelimit.limit", "Basic azE6", "application/json", body, 401},
		{"wrong method", "GET", "/v2/ratelimit.limit", "Bearer transport-key-0001", "", "", 405},
		{"report ok", "POST", "/v2/ratelimit.report", "Bearer transport-key-0001", "application/json", body, 200},
		{"report without auth", "POST", "/v2/ratelimit.report", "", "application/json", body, 401},
		{"report with an unknown key", "POST", "/v2/ratelimit.multiReport", "Bearer transport-key-0002", "application/json", "[" + body + "]", 401},
		{"report by GET", "GET", "/v2/ratelimit.report", "Bearer transport-key-0001", "", "", 405},
		{"report as a form", "POST", "/v2/ratelimit.report", "Bearer transport-key-0001", "application/x-www-form-urlencoded", body, 415},
		{"report too large", "POST", "/v2/ratelimit.report", "Bearer transport-key-0001", "application/json", `{"namespace":"` + strings.Repeat("a", 1<<20) + `"}`, 413},
		{"no content type", "POST", "/v2/ratelimit.limit", "Bearer transport-key-0001", "", body, 415},
		{"form content type", "POST", "/v2/ratelimit.limit", "Bearer transport-key-0001", "application/x-www-form-urlencoded", body, 415},
		{"too large", "POST", "/v2/ratelimit.limit", "Bearer transport-key-0001", "application/json", `{"namespace":"` + strings.Repeat("a", 1<<20) + `"}`, 413},
		{"unknown route", "POST", "/v2/ratelimit.nope", "Bearer transport-key-0001", "application/json", body, 404},
		{"liveness", "GET", "/v2/liveness", "", "", "", 200},
		{"liveness post", "POST", "/v2/liveness", "", "", "", 405},
		{"metrics", "GET", "/metrics", "", "", "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, h, tc.method, tc.path, tc.auth, tc.ct, tc.body)
			if r.code != tc.code {
				t.Fatalf("status %d, want %d: %.300s", r.code, tc.code, r.raw)
			}
			if tc.path != "/metrics" && (r.requestID() == "" || r.ct != "application/json") {
				t.Fatalf("missing requestId or JSON content type (%q): %.300s", r.ct, r.raw)
			}
		})
	}
}

func TestParseRootKey(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		key, ws   string
		wantError bool
	}{
		{"simple", "key-0123456789ab:acme", "key-0123456789ab", "acme", false},
		{"colon in key splits at last", "sk:live:0123456789:acme", "sk:live:0123456789", "acme", false},
		{"key of 15 bytes", "key-0123456789a:acme", "", "", true},
		{"no colon", "k", "", "", true},
		{"empty key", ":acme", "", "", true},
		{"empty workspace", "k:", "", "", true},
		{"space in key", "a b:acme", "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ParseRootKey(tc.in)
			if tc.wantError {
				if !errors.Is(err, ErrInvalidRootKey) {
					t.Fatalf("err = %v, want ErrInvalidRootKey", err)
				}
				if i := strings.LastIndexByte(tc.in, ':'); i >= 4 && strings.Contains(err.Error(), tc.in[:i]) {
					t.Fatalf("the error quotes the key: %v", err)
				}
				return
			}
			if err != nil || k.Key != tc.key || k.Workspace != tc.ws {
				t.Fatalf("got %+v, %v", k, err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"empty", Config{}},
		{"no catalog", Config{Limiter: &sluice.Limiter{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v", err)
			}
		})
	}
}
