package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

const (
	keyA = "Bearer key-of-workspace-a-0123456789"
	keyB = "Bearer key-of-workspace-b-0123456789"
)

// analyticsData returns a getAnalytics answer's data, failing on anything
// but a 200.
func analyticsData(t *testing.T, h http.Handler, auth, body string) map[string]any {
	t.Helper()
	r := do(t, h, http.MethodPost, "/v2/ratelimit.getAnalytics", auth, "application/json", body)
	if r.code != http.StatusOK || r.ct != "application/json" || r.requestID() == "" {
		t.Fatalf("getAnalytics: %d %s", r.code, r.raw)
	}
	return r.body["data"].(map[string]any)
}

// totals sums a series' passed and denied counts.
func totals(data map[string]any) (passed, denied float64) {
	for _, p := range data["series"].([]any) {
		m := p.(map[string]any)
		passed += m["passed"].(float64)
		denied += m["denied"].(float64)
	}
	return passed, denied
}

// top returns a top list as identifier → count.
func top(data map[string]any, list string) map[string]float64 {
	out := map[string]float64{}
	for _, e := range data["top"].(map[string]any)[list].([]any) {
		m := e.(map[string]any)
		out[m["identifier"].(string)] = m["count"].(float64)
	}
	return out
}

// TestGetAnalytics records limit and multiLimit decisions and reads them
// back: the series counts every decision, the top lists name the
// identifiers, for every interval.
func TestGetAnalytics(t *testing.T) {
	h := newServerWith(t, Config{RootKeys: []RootKey{{Key: keyA[7:], Workspace: "a"}}}).Handler()
	limit := func(id string, n int) {
		for range n {
			r := do(t, h, http.MethodPost, "/v2/ratelimit.limit", keyA, "application/json",
				`{"namespace":"api","identifier":"`+id+`","limit":3,"duration":60000}`)
			if r.code != 200 {
				t.Fatalf("limit: %d %s", r.code, r.raw)
			}
		}
	}
	limit("hot", 10) // 3 passed, 7 denied
	limit("cold", 1)
	r := do(t, h, http.MethodPost, "/v2/ratelimit.multiLimit", keyA, "application/json",
		`[{"namespace":"api","identifier":"multi","limit":5,"duration":60000},{"namespace":"api","identifier":"hot","limit":3,"duration":60000}]`)
	if r.code != 200 {
		t.Fatalf("multiLimit: %d %s", r.code, r.raw)
	}
	for _, tc := range []struct {
		interval string
		points   int
		step     float64
	}{{"1m", 60, 1000}, {"1h", 3600, 1000}, {"24h", 1440, 60000}} {
		t.Run(tc.interval, func(t *testing.T) {
			data := analyticsData(t, h, keyA, `{"namespace":"api","interval":"`+tc.interval+`"}`)
			if n := len(data["series"].([]any)); n != tc.points || data["step"] != tc.step || data["tracked"] != true {
				t.Fatalf("%d points of %v ms, tracked %v; want %d of %v", n, data["step"], data["tracked"], tc.points, tc.step)
			}
			// hot: 3 passed, 7 denied, then denied in the multiLimit; cold
			// passed once. Each check of a multiLimit is recorded with its
			// own outcome, as the answer reports it: multi passed (though
			// the call, all or nothing, counted nothing), as the decision
			// metrics count it.
			if p, d := totals(data); p != 5 || d != 8 {
				t.Fatalf("series: %v passed, %v denied; want 5 and 8", p, d)
			}
			if got := top(data, "denied"); got["hot"] != 8 || len(got) != 1 {
				t.Fatalf("top denied %v", got)
			}
			if got := top(data, "requests"); got["hot"] != 11 || got["cold"] != 1 || got["multi"] != 1 {
				t.Fatalf("top requests %v", got)
			}
		})
	}
}

// TestGetAnalyticsWorkspaces checks that a workspace sees only its own
// namespaces: another workspace's namespace of the same name is not found,
// and once it has its own, it sees only its own counts.
func TestGetAnalyticsWorkspaces(t *testing.T) {
	h := newServerWith(t, Config{RootKeys: []RootKey{{Key: keyA[7:], Workspace: "a"}, {Key: keyB[7:], Workspace: "b"}}}).Handler()
	call := func(auth, id string) {
		r := do(t, h, http.MethodPost, "/v2/ratelimit.limit", auth, "application/json", `{"namespace":"api","identifier":"`+id+`","limit":10,"duration":60000}`)
		if r.code != 200 {
			t.Fatalf("limit: %d %s", r.code, r.raw)
		}
	}
	call(keyA, "secret-user")
	call(keyA, "secret-user")
	r := do(t, h, http.MethodPost, "/v2/ratelimit.getAnalytics", keyB, "application/json", `{"namespace":"api","interval":"1h"}`)
	if r.code != http.StatusNotFound || !strings.Contains(r.raw, TypeNamespaceNotFound) || strings.Contains(r.raw, "secret") {
		t.Fatalf("workspace b reads a's namespace: %d %s", r.code, r.raw)
	}
	call(keyB, "b-user")
	data := analyticsData(t, h, keyB, `{"namespace":"api","interval":"1h"}`)
	if p, _ := totals(data); p != 1 || top(data, "requests")["secret-user"] != 0 {
		t.Fatalf("workspace b sees %v passed and top %v", p, top(data, "requests"))
	}
	if p, _ := totals(analyticsData(t, h, keyA, `{"namespace":"api","interval":"1h"}`)); p != 2 {
		t.Fatalf("workspace a sees %v passed, want 2", p)
	}
}

func TestGetAnalyticsMalformed(t *testing.T) {
	h := newTestServer(t).Handler()
	do(t, h, http.MethodPost, "/v2/ratelimit.limit", "Bearer k", "application/json", `{"namespace":"api","identifier":"i","limit":1,"duration":60000}`)
	for _, tc := range []struct {
		name, auth, ct, body string
		code                 int
		want                 string // in the body
	}{
		{"valid", "Bearer k", "application/json", `{"namespace":"api","interval":"1h"}`, 200, `"series":[{"time":`},
		{"unknown namespace", "Bearer k", "application/json", `{"namespace":"nope","interval":"1h"}`, 404, TypeNamespaceNotFound},
		{"bad interval", "Bearer k", "application/json", `{"namespace":"api","interval":"2h"}`, 400, `"location":"body.interval"`},
		{"interval not a string", "Bearer k", "application/json", `{"namespace":"api","interval":3600}`, 400, "must be a string"},
		{"missing interval", "Bearer k", "application/json", `{"namespace":"api"}`, 400, "body.interval"},
		{"missing namespace", "Bearer k", "application/json", `{"interval":"1h"}`, 400, "body.namespace"},
		{"unknown field", "Bearer k", "application/json", `{"namespace":"api","interval":"1h","from":0}`, 400, "body.from"},
		{"control character", "Bearer k", "application/json", `{"namespace":"a\u0001","interval":"1h"}`, 400, "body.namespace"},
		{"trailing data", "Bearer k", "application/json", `{"namespace":"api","interval":"1h"}x`, 400, "body"},
		{"no key", "", "application/json", `{"namespace":"api","interval":"1h"}`, 401, TypeMissingAuth},
		{"wrong content type", "Bearer k", "text/plain", `{"namespace":"api","interval":"1h"}`, 415, TypeUnsupportedMedia},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, h, http.MethodPost, "/v2/ratelimit.getAnalytics", tc.auth, tc.ct, tc.body)
			if r.code != tc.code || !strings.Contains(r.raw, tc.want) || r.ct != "application/json" || r.requestID() == "" {
				t.Fatalf("%d %s; want %d with %s", r.code, r.raw, tc.code, tc.want)
			}
			if tc.code == 400 && len(r.errorLocations()) == 0 {
				t.Fatalf("400 without errors: %s", r.raw)
			}
		})
	}
	r := do(t, h, http.MethodGet, "/v2/ratelimit.getAnalytics", "Bearer k", "", "")
	if r.code != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", r.code)
	}
}

// TestGetAnalyticsOff checks a server without analytics: decisions go on,
// getAnalytics answers a 404 that says why.
func TestGetAnalyticsOff(t *testing.T) {
	st := newMemStore()
	cache, err := store.NewCache(context.Background(), store.CacheConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := sluice.New(sluice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Limiter: lim, Catalog: cache, Metrics: NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); lim.Close(); cache.Close(); st.Close() })
	h := s.Handler()
	if r := do(t, h, http.MethodPost, "/v2/ratelimit.limit", "Bearer k", "application/json", `{"namespace":"api","identifier":"i","limit":1,"duration":60000}`); r.code != 200 {
		t.Fatalf("limit: %d %s", r.code, r.raw)
	}
	r := do(t, h, http.MethodPost, "/v2/ratelimit.getAnalytics", "Bearer k", "application/json", `{"namespace":"api","interval":"1h"}`)
	if r.code != http.StatusNotFound || !strings.Contains(r.raw, TypeAnalyticsOff) {
		t.Fatalf("analytics off: %d %s", r.code, r.raw)
	}
}
