package server

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestReportEndpoint sends ratelimit.report and multiReport calls through
// the handler, between limit calls on the same counters: a report is
// answered like a limit call with success true and what remains after it,
// counts its whole cost past the limit (the limit call after it is
// denied), takes the namespace's override like a limit call, stays in its
// workspace, counts in sluice_ratelimit_decisions_total as outcome
// "reported" and is no decision for the analytics.
func TestReportEndpoint(t *testing.T) {
	h := newServerWith(t, Config{RootKeys: []RootKey{{Key: keyA[7:], Workspace: "a"}, {Key: keyB[7:], Workspace: "b"}}}).Handler()
	body := func(id string, limit, cost int) string {
		return `{"namespace":"tokens","identifier":"` + id + `","limit":` + strconv.Itoa(limit) + `,"duration":60000,"cost":` + strconv.Itoa(cost) + `}`
	}
	if r := do(t, h, http.MethodPost, "/v2/ratelimit.setOverride", keyA, "application/json",
		`{"namespace":"tokens","identifier":"vip","limit":100000,"duration":60000}`); r.code != 200 {
		t.Fatalf("setOverride: %d %s", r.code, r.raw)
	}
	for _, tc := range []struct {
		name, auth, path, body string
		want                   string // the answer's data
	}{
		{"a report within the limit", keyA, "report", body("u", 1000, 700), `{"limit":1000,"remaining":300,"reset":`},
		{"a report past the limit counts whole", keyA, "report", body("u", 1000, 900), `{"limit":1000,"remaining":0,"reset":`},
		{"the limit call after it is denied", keyA, "limit", body("u", 1000, 1), `"success":false`},
		{"a report of the denied counter still counts", keyA, "report", body("u", 1000, 5), `"success":true`},
		{"another workspace has its own counter", keyB, "limit", body("u", 1000, 1), `{"limit":1000,"remaining":999,"reset":`},
		{"the override applies to reports", keyA, "report", body("vip", 10, 50), `{"limit":100000,"remaining":99950,"reset":`},
		{"a batch of reports counts every one", keyA, "multiReport",
			"[" + body("m", 10, 8) + "," + body("m", 10, 8) + "]", `{"passed":true,"limits":[{"namespace":"tokens","identifier":"m","limit":10,"remaining":2,`},
		{"its second report went past the limit", keyA, "limit", body("m", 10, 0), `"success":false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, h, http.MethodPost, "/v2/ratelimit."+tc.path, tc.auth, "application/json", tc.body)
			if r.code != 200 || r.requestID() == "" {
				t.Fatalf("status %d: %s", r.code, r.raw)
			}
			if !strings.Contains(r.raw, tc.want) {
				t.Fatalf("answer %s, want %s in it", r.raw, tc.want)
			}
			report := strings.HasSuffix(tc.path, "eport")
			if report && (strings.Contains(r.raw, `"success":false`) || strings.Contains(r.raw, `"passed":false`)) {
				t.Fatalf("a report was denied: %s", r.raw)
			}
		})
	}
	metrics := do(t, h, http.MethodGet, "/metrics", "", "", "").raw
	for _, want := range []string{
		`sluice_ratelimit_decisions_total{namespace="tokens",outcome="reported"} 6`,
		`sluice_ratelimit_decisions_total{namespace="tokens",outcome="denied"} 2`,
		`sluice_ratelimit_decisions_total{namespace="tokens",outcome="passed"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	data := analyticsData(t, h, keyA, `{"namespace":"tokens","interval":"1h"}`)
	if p, d := totals(data); p != 0 || d != 2 {
		t.Fatalf("analytics: %v passed, %v denied; want the 2 denied limit calls only", p, d)
	}
}
