package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fuzzEndpoint feeds arbitrary bodies to one endpoint: the server must never
// panic, never answer 5xx, and always answer JSON with a request id.
func fuzzEndpoint(f *testing.F, path string, seeds ...string) {
	for _, s := range seeds {
		f.Add(s)
	}
	s := newTestServer(f)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		if rec.Header().Get("Content-Type") != "application/json" || !strings.Contains(rec.Body.String(), `"requestId":"req_`) {
			t.Fatalf("not a JSON response with a request id: %s", rec.Body)
		}
		if rec.Code == 400 && !strings.Contains(rec.Body.String(), `"errors":[{`) {
			t.Fatalf("400 without errors list: %s", rec.Body)
		}
	})
}

func FuzzDecodeLimit(f *testing.F) {
	fuzzEndpoint(f, "/v2/ratelimit.limit",
		`{"namespace":"n","identifier":"i","limit":1,"duration":60000}`,
		`{"namespace":"n","identifier":"i","limit":1,"duration":60000,"cost":0}`,
		`{"namespace":"n","identifier":"\ud800","limit":9007199254740992,"duration":1e3}`,
		`{"namespace":"n","namespace":"m"}`, `[]`, `null`, `{`, "\xff",
	)
}

func FuzzDecodeMultiLimit(f *testing.F) {
	fuzzEndpoint(f, "/v2/ratelimit.multiLimit",
		`[{"namespace":"n","identifier":"i","limit":1,"duration":60000}]`,
		`[{"namespace":"n","identifier":"i","limit":1,"duration":60000},{"namespace":"n","identifier":"i","limit":1,"duration":60000,"cost":2}]`,
		`[]`, `[{}]`, `[1,2]`,
	)
}

func FuzzDecodeReport(f *testing.F) {
	fuzzEndpoint(f, "/v2/ratelimit.report",
		`{"namespace":"n","identifier":"i","limit":1,"duration":60000,"cost":900}`,
		`{"namespace":"n","identifier":"i","limit":0,"duration":1000,"cost":9007199254740991}`,
		`{"namespace":"n","identifier":"i","limit":1,"duration":60000,"cost":-1}`, `{}`, `[`,
	)
}

func FuzzDecodeMultiReport(f *testing.F) {
	fuzzEndpoint(f, "/v2/ratelimit.multiReport",
		`[{"namespace":"n","identifier":"i","limit":1,"duration":60000,"cost":5},{"namespace":"n","identifier":"i","limit":1,"duration":60000,"cost":5}]`,
		`[]`, `[{"cost":1}]`, `{}`,
	)
}

func FuzzDecodeOverrides(f *testing.F) {
	fuzzEndpoint(f, "/v2/ratelimit.setOverride",
		`{"namespace":"n","identifier":"user_*","limit":1,"duration":60000}`,
		`{"namespace":"n","identifier":"*","limit":0,"duration":1000}`,
	)
}

func FuzzDecodeList(f *testing.F) {
	fuzzEndpoint(f, "/v2/ratelimit.listOverrides",
		`{"namespace":"n"}`, `{"namespace":"n","limit":100,"cursor":"YQ"}`, `{"namespace":"n","cursor":"!!"}`,
	)
}

func FuzzDecodeAnalytics(f *testing.F) {
	fuzzEndpoint(f, "/v2/ratelimit.getAnalytics",
		`{"namespace":"n","interval":"1h"}`, `{"namespace":"n","interval":"24h"}`, `{"namespace":"n","interval":"1m"}`,
		`{"namespace":"n","interval":"2h"}`, `{"namespace":"n"}`, `{"interval":1}`, `{"namespace":"\u0000","interval":"1h","x":1}`,
	)
}
