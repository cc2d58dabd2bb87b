package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/analytics"
)

// consoleDo sends one request to the console with an optional Origin.
func consoleDo(h http.Handler, method, path, ct, origin, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestConsoleHandler checks the console's files and its JSON endpoints,
// which answer what the API answers, through the same code.
func TestConsoleHandler(t *testing.T) {
	s := newServerWith(t, Config{RootKeys: []RootKey{{Key: keyA[7:], Workspace: "a"}}})
	api, console := s.Handler(), s.ConsoleHandler()
	do(t, api, http.MethodPost, "/v2/ratelimit.limit", keyA, "application/json", `{"namespace":"api","identifier":"u","limit":1,"duration":60000}`)
	const ws = "/api/workspaces/a/v2/ratelimit."
	for _, tc := range []struct {
		name, method, path, ct, origin, body string
		code                                 int
		want                                 string
	}{
		{"page", "GET", "/", "", "", "", 200, "<title>Sluice console</title>"},
		{"script", "GET", "/console.js", "", "", "", 200, "getAnalytics"},
		{"style", "GET", "/console.css", "", "", "", 200, "#chart"},
		{"no such file", "GET", "/nope.js", "", "", "", 404, ""},
		{"no API here", "POST", "/v2/ratelimit.limit", "application/json", "", "{}", 404, ""},
		{"page by POST", "POST", "/", "", "", "", 405, ""},
		{"namespaces", "GET", "/api/namespaces", "", "", "", 200, `{"workspace":"a","namespace":"api","passed":1,"denied":0}`},
		{"namespaces by POST", "POST", "/api/namespaces", "", "", "", 405, TypeMethodNotAllowed},
		{"unknown endpoint", "POST", "/api/workspaces/a/v2/ratelimit.limit", "application/json", "", "{}", 404, TypeRouteNotFound},
		{"analytics", "POST", ws + "getAnalytics", "application/json", "", `{"namespace":"api","interval":"1m"}`, 200, `"top":{"denied":[],"requests":[{"identifier":"u","count":1,"error":0}]}`},
		{"same origin", "POST", ws + "getAnalytics", "application/json", "http://example.com", `{"namespace":"api","interval":"1m"}`, 200, `"series"`},
		{"other origin", "POST", ws + "getAnalytics", "application/json", "http://evil.test", `{"namespace":"api","interval":"1m"}`, 403, "console's own page"},
		{"not JSON", "POST", ws + "setOverride", "text/plain", "", `{"namespace":"api","identifier":"u","limit":5,"duration":60000}`, 415, TypeUnsupportedMedia},
		{"set", "POST", ws + "setOverride", "application/json", "", `{"namespace":"api","identifier":"u","limit":5,"duration":60000}`, 200, `"overrideId"`},
		{"set invalid", "POST", ws + "setOverride", "application/json", "", `{"namespace":"api","identifier":"u","limit":-1,"duration":60000}`, 400, `"location":"body.limit"`},
		{"list", "POST", ws + "listOverrides", "application/json", "", `{"namespace":"api"}`, 200, `"identifier":"u","limit":5`},
		{"other workspace", "POST", "/api/workspaces/b/v2/ratelimit.listOverrides", "application/json", "", `{"namespace":"api"}`, 404, TypeNamespaceNotFound},
		{"bad workspace", "POST", "/api/workspaces/a%01/v2/ratelimit.listOverrides", "application/json", "", `{"namespace":"api"}`, 400, "path.workspace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := consoleDo(console, tc.method, tc.path, tc.ct, tc.origin, tc.body)
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("%s %s: %d %.300s; want %d with %s", tc.method, tc.path, rec.Code, rec.Body.String(), tc.code, tc.want)
			}
			if tc.code == 200 && tc.method == "GET" && strings.HasSuffix(tc.path, "/") && rec.Header().Get("Content-Security-Policy") == "" {
				t.Fatal("the page has no Content-Security-Policy")
			}
		})
	}
	// The override set through the console is the API's.
	r := do(t, api, http.MethodPost, "/v2/ratelimit.getOverride", keyA, "application/json", `{"namespace":"api","identifier":"u"}`)
	if r.code != 200 || !strings.Contains(r.raw, `"limit":5`) {
		t.Fatalf("getOverride after the console set it: %d %s", r.code, r.raw)
	}
	if rec := consoleDo(console, "POST", ws+"deleteOverride", "application/json", "", `{"namespace":"api","identifier":"u"}`); rec.Code != 200 {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	if r := do(t, api, http.MethodPost, "/v2/ratelimit.getOverride", keyA, "application/json", `{"namespace":"api","identifier":"u"}`); r.code != 404 {
		t.Fatalf("getOverride after the console deleted it: %d %s", r.code, r.raw)
	}
}

// countingAnalytics is a recorder that remembers how many namespaces the
// last Totals call asked for.
type countingAnalytics struct {
	*analytics.Recorder
	asked atomic.Int64
}

func (c *countingAnalytics) Totals(keys []analytics.Key, now time.Time) []analytics.Counts {
	c.asked.Store(int64(len(keys)))
	return c.Recorder.Totals(keys, now)
}

// consoleList is the data of GET /api/namespaces.
type consoleList struct {
	Namespaces []struct {
		Workspace, Namespace string
		Passed, Denied       uint64
	}
	Total, More int
	Analytics   bool
	Since       int64
}

// TestConsoleNamespaces checks the console's first page, GET
// /api/namespaces: each namespace with its last hour's totals, sorted;
// the list bounded by ?limit= (default 100, at most 1000) and by
// consoleListBytes of JSON, the rest counted in "more", and the totals
// read only for the namespaces listed; ?match= filters; bad queries get a
// 400 with the API's error body.
func TestConsoleNamespaces(t *testing.T) {
	rec, err := analytics.New(analytics.Config{MaxNamespaces: 1000})
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingAnalytics{Recorder: rec}
	console := newServerWith(t, Config{Analytics: counting}).ConsoleHandler()
	now := time.Now()
	const shop = "shop/€ \\\"#?&%" // characters that JSON, paths and URLs escape
	for i := range 150 {
		rec.Record("a", fmt.Sprintf("ns-%03d", i), "u", true, now)
	}
	for i := range 5 {
		rec.Record("b", shop, "u", i < 3, now)
	}
	long := strings.Repeat("\x01", MaxNameBytes-4) // 3,072 bytes of JSON each
	for i := range 400 {
		rec.Record("z", fmt.Sprintf("%04d", i)+long, "u", false, now)
	}
	rec.Record("a", "old", "u", false, now.Add(-2*time.Hour))
	const all = 150 + 1 + 400 + 1
	for _, tc := range []struct {
		name, query    string
		listed, more   int
		first          string // the first namespace listed, and its totals
		passed, denied uint64
	}{
		{"default limit", "", consoleListDefault, all - consoleListDefault, "ns-000", 1, 0},
		{"limit", "?limit=3", 3, all - 3, "ns-000", 1, 0},
		{"byte bound", "?limit=1000", 152 + 328, all - 152 - 328, "ns-000", 1, 0}, // 328 names of z fit in the rest of 1 MiB
		{"match a namespace", "?match=shop", 1, 0, shop, 3, 2},
		{"match a workspace", "?match=z&limit=2", 2, 398, "0000" + long, 0, 1},
		{"match nothing", "?match=nothing", 0, 0, "", 0, 0},
		{"empty match", "?match=&limit=1", 1, all - 1, "ns-000", 1, 0},
		{"escaped", "?match=%E2%82%AC", 1, 0, shop, 3, 2},
		{"older than the hour", "?match=old", 1, 0, "old", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counting.asked.Store(0)
			r := consoleDo(console, "GET", "/api/namespaces"+tc.query, "", "", "")
			var body struct{ Data consoleList }
			if r.Code != 200 || json.Unmarshal(r.Body.Bytes(), &body) != nil {
				t.Fatalf("%d %.300s", r.Code, r.Body)
			}
			l := body.Data
			if len(l.Namespaces) != tc.listed || l.More != tc.more || l.Total != tc.listed+tc.more || !l.Analytics {
				t.Fatalf("%d listed, %d more, %d in all; want %d and %d", len(l.Namespaces), l.More, l.Total, tc.listed, tc.more)
			}
			if r.Body.Len() > consoleListBytes+200 || counting.asked.Load() > int64(tc.listed) {
				t.Fatalf("an answer of %d bytes, totals asked for %d namespaces", r.Body.Len(), counting.asked.Load())
			}
			if n := l.Namespaces; tc.listed > 0 && (n[0].Namespace != tc.first || n[0].Passed != tc.passed || n[0].Denied != tc.denied) {
				t.Fatalf("first %.40q, %d passed, %d denied; want %.40q, %d and %d", n[0].Namespace, n[0].Passed, n[0].Denied, tc.first, tc.passed, tc.denied)
			}
		})
	}
}

// TestConsoleNamespacesBadQuery checks that a query GET /api/namespaces
// does not take gets a 400 with the API's error body, and a server
// without analytics an empty list that says so.
func TestConsoleNamespacesBadQuery(t *testing.T) {
	console := newServerWith(t, Config{}).ConsoleHandler()
	for _, tc := range []struct{ name, query, location string }{
		{"limit zero", "limit=0", "query.limit"},
		{"limit over the max", "limit=1001", "query.limit"},
		{"limit not a number", "limit=ten", "query.limit"},
		{"limit twice", "limit=1&limit=2", "query.limit"},
		{"unknown parameter", "page=2", "query.page"},
		{"unknown parameter echoed safely", "%01=1", "query.\ufffd"},
		{"bad escape", "match=%zz", "query"},
		{"match too long", "match=" + strings.Repeat("x", MaxNameBytes+1), "query.match"},
		{"match not UTF-8", "match=%FF", "query.match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := consoleDo(console, "GET", "/api/namespaces?"+tc.query, "", "", "")
			if r.Code != 400 || !strings.Contains(r.Body.String(), TypeInvalidInput) || !strings.Contains(r.Body.String(), `"location":"`+tc.location+`"`) {
				t.Fatalf("%d %.300s; want 400 at %s", r.Code, r.Body, tc.location)
			}
		})
	}
	off := newServerWith(t, Config{Analytics: noAnalytics{}}).ConsoleHandler()
	r := consoleDo(off, "GET", "/api/namespaces", "", "", "")
	if r.Code != 200 || !strings.Contains(r.Body.String(), `{"namespaces":[],"total":0,"more":0,"analytics":false,`) {
		t.Fatalf("analytics off: %d %s", r.Code, r.Body)
	}
}
