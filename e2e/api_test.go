package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// window is the default test window: one day, so that no test crosses a cell
// boundary between requests whose exact counts it checks.
const window = int64(86_400_000)

func TestLimit(t *testing.T) {
	n := start(t, nil)
	for i := range 3 {
		d := n.limit("k", "api", "user-1", 3, window, 1)
		if !d.Success || d.Remaining != int64(2-i) || d.Limit != 3 {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	before := time.Now().UnixMilli()
	d := n.limit("k", "api", "user-1", 3, window, 1)
	if d.Success || d.Remaining != 0 {
		t.Fatalf("4th request should be denied with 200: %+v", d)
	}
	// reset is the end of the current fixed cell: (floor(t/d)+1)*d.
	if d.Reset%window != 0 || d.Reset <= before || d.Reset > before+window+1000 {
		t.Fatalf("reset %d is not the end of the current window cell (now %d)", d.Reset, before)
	}
	t.Run("cost", func(t *testing.T) {
		if d := n.limit("k", "api", "user-2", 10, window, 7); !d.Success || d.Remaining != 3 {
			t.Fatalf("%+v", d)
		}
		if d := n.limit("k", "api", "user-2", 10, window, 4); d.Success || d.Remaining != 3 {
			t.Fatalf("cost above remaining must be denied without counting: %+v", d)
		}
		if d := n.limit("k", "api", "user-2", 10, window, 0); !d.Success || d.Remaining != 3 {
			t.Fatalf("peek: %+v", d)
		}
	})
	t.Run("default cost is 1", func(t *testing.T) {
		var d limitData
		n.call("k", "limit", `{"namespace":"api","identifier":"user-3","limit":5,"duration":60000}`).data(t, &d)
		if d.Remaining != 4 {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("limit 0 denies", func(t *testing.T) {
		if d := n.limit("k", "api", "user-4", 0, window, 1); d.Success {
			t.Fatalf("%+v", d)
		}
	})
}

type multiData struct {
	Passed bool `json:"passed"`
	Limits []struct {
		Namespace  string `json:"namespace"`
		Identifier string `json:"identifier"`
		Limit      int64  `json:"limit"`
		Remaining  int64  `json:"remaining"`
		Reset      int64  `json:"reset"`
		Passed     bool   `json:"passed"`
		OverrideID string `json:"overrideId"`
	} `json:"limits"`
}

func TestMultiLimitAllOrNothing(t *testing.T) {
	n := start(t, nil)
	check := func(id string, limit int64) map[string]any {
		return map[string]any{"namespace": "multi", "identifier": id, "limit": limit, "duration": window}
	}
	var d multiData
	n.call("k", "multiLimit", []any{check("a", 5), check("b", 1)}).data(t, &d)
	if !d.Passed || len(d.Limits) != 2 || !d.Limits[0].Passed || d.Limits[0].Remaining != 4 || d.Limits[1].Identifier != "b" {
		t.Fatalf("first batch: %+v", d)
	}
	// b is exhausted: the whole batch fails and a is not counted.
	n.call("k", "multiLimit", []any{check("a", 5), check("b", 1)}).data(t, &d)
	if d.Passed || !d.Limits[0].Passed || d.Limits[1].Passed {
		t.Fatalf("second batch: %+v", d)
	}
	if got := n.limit("k", "multi", "a", 5, window, 0); got.Remaining != 4 {
		t.Fatalf("a was counted by a failed batch: remaining %d, want 4", got.Remaining)
	}
	// Two checks on one counter see each other's speculative cost.
	n.call("k", "multiLimit", []any{check("c", 2), check("c", 2)}).data(t, &d)
	if !d.Passed || d.Limits[1].Remaining != 0 {
		t.Fatalf("same counter twice: %+v", d)
	}
}

type overrideData struct {
	OverrideID string `json:"overrideId"`
	Duration   int64  `json:"duration"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
}

func (n *node) setOverride(key, ns, id string, limit, duration int64) string {
	n.t.Helper()
	var d struct {
		OverrideID string `json:"overrideId"`
	}
	n.call(key, "setOverride", map[string]any{"namespace": ns, "identifier": id, "limit": limit, "duration": duration}).data(n.t, &d)
	if !strings.HasPrefix(d.OverrideID, "rlor_") {
		n.t.Fatalf("overrideId %q", d.OverrideID)
	}
	return d.OverrideID
}

func TestOverrides(t *testing.T) {
	n := start(t, nil)
	ids := overrideIDs{
		exact:  n.setOverride("k", "ov", "vip", 100, 2*window),
		prefix: n.setOverride("k", "ov", "user_*", 2, 3_600_000),
		suffix: n.setOverride("k", "ov", "*_bot", 1, window),
		longer: n.setOverride("k", "ov", "user_1*", 4, window),
	}
	exact := ids.exact

	t.Run("precedence", func(t *testing.T) { checkOverridePrecedence(t, n, ids) })
	t.Run("override replaces the duration", func(t *testing.T) {
		d := n.limit("k", "ov", "user_7", 9, window, 1)
		if d.Reset%3_600_000 != 0 || d.Reset-time.Now().UnixMilli() > 3_600_000 {
			t.Fatalf("reset %d is not the end of a one-hour cell", d.Reset)
		}
		n.limit("k", "ov", "user_7", 9, window, 1)
		if d := n.limit("k", "ov", "user_7", 9, window, 1); d.Success {
			t.Fatalf("third request over the override's limit 2 passed: %+v", d)
		}
	})
	t.Run("set again keeps the id", func(t *testing.T) {
		if id := n.setOverride("k", "ov", "vip", 50, window); id != exact {
			t.Fatalf("id changed: %s -> %s", exact, id)
		}
	})
	t.Run("get", func(t *testing.T) {
		var o overrideData
		n.call("k", "getOverride", map[string]any{"namespace": "ov", "identifier": "vip"}).data(t, &o)
		if o != (overrideData{exact, window, "vip", 50}) {
			t.Fatalf("%+v", o)
		}
	})
	t.Run("get by namespace id", func(t *testing.T) {
		nsID := namespaceID(t, n, "k", "ov")
		var o overrideData
		n.call("k", "getOverride", map[string]any{"namespace": nsID, "identifier": "vip"}).data(t, &o)
		if o.OverrideID != exact {
			t.Fatalf("%+v", o)
		}
	})
	t.Run("list pages", func(t *testing.T) { checkOverridePages(t, n) })
	t.Run("delete", func(t *testing.T) {
		var d map[string]any
		n.call("k", "deleteOverride", map[string]any{"namespace": "ov", "identifier": "vip"}).data(t, &d)
		if r := n.call("k", "getOverride", map[string]any{"namespace": "ov", "identifier": "vip"}); r.Code != 404 {
			t.Fatalf("get after delete: %d %s", r.Code, r.Raw)
		}
		if r := n.call("k", "deleteOverride", map[string]any{"namespace": "ov", "identifier": "vip"}); r.Code != 404 {
			t.Fatalf("second delete: %d %s", r.Code, r.Raw)
		}
		if d := n.limit("k", "ov", "vip", 9, window, 0); d.OverrideID != "" || d.Limit != 9 {
			t.Fatalf("deleted override still applies: %+v", d)
		}
	})
	t.Run("unknown namespace is 404", func(t *testing.T) { checkUnknownNamespace404(t, n) })
}

// overrideIDs are the ids of TestOverrides' four overrides.
type overrideIDs struct{ exact, prefix, suffix, longer string }

// checkOverridePrecedence checks which override each identifier gets: the
// exact one, else the pattern with the longest literal part.
func checkOverridePrecedence(t *testing.T, n *node, ids overrideIDs) {
	for _, tc := range []struct {
		name, id string
		want     string
		limit    int64
	}{
		{"exact", "vip", ids.exact, 100},
		{"prefix", "user_2", ids.prefix, 2},
		{"longest literal wins", "user_12", ids.longer, 4},
		{"prefix over suffix by literal length", "user_bot", ids.prefix, 2},
		{"suffix", "crawler_bot", ids.suffix, 1},
		{"no override", "nobody", "", 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := n.limit("k", "ov", tc.id, 9, window, 0)
			if d.OverrideID != tc.want || d.Limit != tc.limit {
				t.Fatalf("got override %q limit %d, want %q limit %d", d.OverrideID, d.Limit, tc.want, tc.limit)
			}
		})
	}
}

// checkOverridePages lists namespace ov's overrides three a page and
// checks that the pages end and hold every override once, in order.
func checkOverridePages(t *testing.T, n *node) {
	var got []string
	body := map[string]any{"namespace": "ov", "limit": 3}
	for page := 0; ; page++ {
		r := n.call("k", "listOverrides", body)
		var os []overrideData
		r.data(t, &os)
		for _, o := range os {
			got = append(got, o.Identifier)
		}
		if r.Body.Pagination == nil {
			t.Fatalf("no pagination: %s", r.Raw)
		}
		if !r.Body.Pagination.HasMore {
			break
		}
		if page > 5 {
			t.Fatal("pagination does not end")
		}
		body["cursor"] = r.Body.Pagination.Cursor
	}
	if want := "[*_bot user_* user_1* vip]"; fmt.Sprint(got) != want {
		t.Fatalf("listed %v, want %s", got, want)
	}
}

// checkUnknownNamespace404 checks that the override endpoints answer 404
// for a namespace never used.
func checkUnknownNamespace404(t *testing.T, n *node) {
	for _, ep := range []string{"getOverride", "deleteOverride"} {
		if r := n.call("k", ep, map[string]any{"namespace": "never-used", "identifier": "x"}); r.Code != 404 || !strings.Contains(r.Body.Error.Type, "namespace_not_found") {
			t.Fatalf("%s: %d %s", ep, r.Code, r.Raw)
		}
	}
	if r := n.call("k", "listOverrides", map[string]any{"namespace": "never-used"}); r.Code != 404 {
		t.Fatalf("list: %d %s", r.Code, r.Raw)
	}
}

// namespaceID returns the id of a namespace. The Unkey API never returns
// namespace ids, so it is read from the server's "namespace created" log.
func namespaceID(t *testing.T, n *node, key, ns string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(n.logs(), "\n") {
			if strings.Contains(line, `"msg":"namespace created"`) && strings.Contains(line, `"name":"`+ns+`"`) {
				i := strings.Index(line, `"id":"`)
				if i >= 0 {
					rest := line[i+6:]
					return rest[:strings.IndexByte(rest, '"')]
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no 'namespace created' log line for %q:\n%s", ns, n.logs())
	return ""
}

func TestWorkspaceIsolation(t *testing.T) {
	n := start(t, nil, "--root-key", "key-a-0123456789:acme", "--root-key", "key:b-0123456789:globex")
	// key-a exhausts its counter; globex's identical counter is untouched.
	n.limit("key-a-0123456789", "shared", "u", 1, window, 1)
	if d := n.limit("key-a-0123456789", "shared", "u", 1, window, 1); d.Success {
		t.Fatal("acme's second request passed")
	}
	if d := n.limit("key:b-0123456789", "shared", "u", 1, window, 1); !d.Success {
		t.Fatal("globex was limited by acme's counter")
	}
	id := n.setOverride("key-a-0123456789", "shared", "vip", 1000, window)
	nsID := namespaceID(t, n, "key-a-0123456789", "shared")
	for _, tc := range []struct {
		name, endpoint, namespace string
	}{
		{"get by name", "getOverride", "shared"},
		{"get by other workspace's namespace id", "getOverride", nsID},
		{"delete by other workspace's namespace id", "deleteOverride", nsID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := n.call("key:b-0123456789", tc.endpoint, map[string]any{"namespace": tc.namespace, "identifier": "vip"})
			if r.Code != http.StatusNotFound {
				t.Fatalf("globex reached acme's override: %d %s", r.Code, r.Raw)
			}
		})
	}
	if d := n.limit("key:b-0123456789", "shared", "vip", 1, window, 0); d.OverrideID != "" || d.Limit != 1 {
		t.Fatalf("acme's override applied to globex: %+v", d)
	}
	if d := n.limit("key-a-0123456789", "shared", "vip", 1, window, 0); d.OverrideID != id {
		t.Fatalf("acme's own override missing: %+v", d)
	}
	var os []overrideData
	n.call("key:b-0123456789", "listOverrides", map[string]any{"namespace": "shared"}).data(t, &os)
	if len(os) != 0 {
		t.Fatalf("globex lists acme's overrides: %+v", os)
	}
}

func TestErrorStatuses(t *testing.T) {
	const good = "good-key-0123456789"
	n := start(t, nil, "--root-key", good+":acme")
	valid := `{"namespace":"n","identifier":"i","limit":1,"duration":60000}`
	for _, tc := range []struct {
		name, method, path, key, ct, body string
		code                              int
		errType                           string
	}{
		{"400 unknown field", "POST", "/v2/ratelimit.limit", good, "application/json", `{"namespace":"n","identifier":"i","limit":1,"duration":60000,"x":1}`, 400, "invalid_input"},
		{"400 big number", "POST", "/v2/ratelimit.limit", good, "application/json", `{"namespace":"n","identifier":"i","limit":9007199254740992,"duration":60000}`, 400, "invalid_input"},
		{"400 duration", "POST", "/v2/ratelimit.setOverride", good, "application/json", `{"namespace":"n","identifier":"i","limit":1,"duration":10}`, 400, "invalid_input"},
		{"400 list limit", "POST", "/v2/ratelimit.listOverrides", good, "application/json", `{"namespace":"n","limit":101}`, 400, "invalid_input"},
		{"400 bad cursor", "POST", "/v2/ratelimit.listOverrides", good, "application/json", `{"namespace":"n","cursor":"%%%"}`, 400, "invalid_input"},
		{"401 missing key", "POST", "/v2/ratelimit.limit", "", "application/json", valid, 401, "authentication"},
		{"401 unknown key", "POST", "/v2/ratelimit.limit", "bad", "application/json", valid, 401, "authentication"},
		{"404 route", "POST", "/v2/ratelimit.unknown", good, "application/json", valid, 404, "not_found"},
		{"404 override", "POST", "/v2/ratelimit.getOverride", good, "application/json", `{"namespace":"n","identifier":"nope"}`, 404, "override_not_found"},
		{"405", "PUT", "/v2/ratelimit.limit", good, "application/json", valid, 405, "method_not_allowed"},
		{"413", "POST", "/v2/ratelimit.limit", good, "application/json", `{"namespace":"` + strings.Repeat("x", 1<<20+10) + `"}`, 413, "too_large"},
		{"415", "POST", "/v2/ratelimit.limit", good, "text/plain", valid, 415, "unsupported_media_type"},
		{"415 charset utf-16", "POST", "/v2/ratelimit.limit", good, "application/json; charset=utf-16", valid, 415, "unsupported_media_type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.name, "404 override") {
				n.limit(good, "n", "i", 1, window, 0) // create the namespace
			}
			r := n.do(tc.method, tc.path, tc.key, tc.ct, strings.NewReader(tc.body))
			if r.Code != tc.code {
				t.Fatalf("status %d, want %d: %.300s", r.Code, tc.code, r.Raw)
			}
			e := r.Body.Error
			if e == nil || e.Status != tc.code || e.Title == "" || e.Detail == "" || !strings.Contains(e.Type, tc.errType) {
				t.Fatalf("error body: %.300s", r.Raw)
			}
			if tc.code == 400 && len(e.Errors) == 0 {
				t.Fatalf("400 without errors list: %s", r.Raw)
			}
		})
	}
}

func TestLivenessAndMetrics(t *testing.T) {
	n := start(t, nil)
	r := n.do("GET", "/v2/liveness", "", "", nil)
	if r.Code != 200 || !strings.Contains(string(r.Body.Data), `"OK"`) {
		t.Fatalf("liveness: %d %s", r.Code, r.Raw)
	}
	n.limit("k", "metered", "u", 1, window, 1)
	n.limit("k", "metered", "u", 1, window, 1)
	m := n.metrics()
	for _, want := range []string{
		`sluice_ratelimit_decisions_total{namespace="metered",outcome="passed"} 1`,
		`sluice_ratelimit_decisions_total{namespace="metered",outcome="denied"} 1`,
		`sluice_http_request_duration_seconds_count{endpoint="ratelimit.limit"}`,
		`sluice_http_requests_in_flight`,
		`sluice_store_up 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
