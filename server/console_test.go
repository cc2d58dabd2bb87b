package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
		{"namespaces", "GET", "/api/namespaces", "", "", "", 200, `{"workspace":"a","namespace":"api"}`},
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
