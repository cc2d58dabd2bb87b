package rls

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		domains []string
	}{
		{"folder of examples", "testdata/examples", []string{
			"edge_proxy_per_ip", "example4", "example6", "example7", "example8", "example9",
			"internal", "messaging", "mongo_cps", "windows",
		}},
		{"one file", "testdata/examples/2-messaging.yaml", []string{"messaging"}},
		{"folder skips hidden files, other extensions and subfolders", "testdata/skips", []string{"only"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Load(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if got := rs.Domains(); !slices.Equal(got, tt.domains) {
				t.Errorf("domains = %q, want %q", got, tt.domains)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		path string
		want []string // substrings of the error
	}{
		{"duplicate domain across files", "testdata/dupdomain",
			[]string{"testdata/dupdomain/b.yml", `duplicate domain "shared"`, "also in testdata/dupdomain/a.yaml"}},
		{"folder without YAML", "testdata/noyaml", []string{"testdata/noyaml: no *.yaml or *.yml file"}},
		{"missing path", "testdata/nonexistent.yaml", []string{"testdata/nonexistent.yaml", "no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.path)
			checkConfigError(t, err, tt.want...)
		})
	}
	t.Run("missing path is also fs.ErrNotExist", func(t *testing.T) {
		if _, err := Load("testdata/nonexistent.yaml"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("err = %v, want fs.ErrNotExist", err)
		}
	})
}

func checkConfigError(t *testing.T, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	if !strings.HasPrefix(err.Error(), "rls: invalid config: ") {
		t.Errorf("err = %q, want the prefix %q", err, "rls: invalid config: ")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err = %q, want it to contain %q", err, w)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // substring of the error after "test.yaml: "
	}{
		{"empty file", ``, "domain is missing"},
		{"missing domain", "descriptors:\n- key: a\n", "domain is missing"},
		{"domain too long", "domain: " + strings.Repeat("d", MaxDomainBytes+1) + "\n", "domain is 246 bytes, over the cap of 245"},
		{"allow_descriptor_limits not a bool", "domain: d\nallow_descriptor_limits: sometimes\n", "cannot unmarshal !!str `sometimes`"},
		{"unknown top-level field", "domain: d\ndescriptor: []\n", "line 2: field descriptor not found"},
		{"unknown descriptor field", "domain: d\ndescriptors:\n- key: a\n  rate_limt: {}\n", "line 4: field rate_limt not found in type rls.descriptor"},
		{"unknown rate_limit field", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unit: second, requests_per_unit: 1, quota_mode: true}\n", "field quota_mode not found in type rls.rateLimit"},
		{"wrong type", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unit: second, requests_per_unit: many}\n", "cannot unmarshal !!str `many`"},
		{"duplicate mapping key", "domain: d\ndomain: e\n", `mapping key "domain" already defined`},
		{"syntax error", "domain: [d\n", "did not find expected"},
		{"two documents", "domain: d\n---\ndomain: e\n", "more than one YAML document"},
		{"empty key", "domain: d\ndescriptors:\n- value: v\n", `domain "d": a top-level descriptor has an empty key`},
		{"empty nested key", "domain: d\ndescriptors:\n- key: a\n  value: v\n  descriptors:\n  - value: w\n", `a descriptor under "a=v" has an empty key`},
		{"duplicate key and value", "domain: d\ndescriptors:\n- key: a\n  value: v\n- key: a\n  value: v\n", `duplicate descriptor "a=v"`},
		{"duplicate key without value", "domain: d\ndescriptors:\n- key: a\n- key: a\n", `duplicate descriptor "a"`},
		{"duplicate nested", "domain: d\ndescriptors:\n- key: a\n  descriptors:\n  - key: b\n  - key: b\n", `duplicate descriptor "a > b"`},
		{"unknown unit", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unit: fortnight, requests_per_unit: 1}\n", `descriptor "a": unknown unit "fortnight"`},
		{"unknown unit UNKNOWN", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unit: unknown, requests_per_unit: 1}\n", `unknown unit "unknown"`},
		{"missing unit", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {requests_per_unit: 1}\n", "unit is missing"},
		{"missing requests_per_unit", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unit: second}\n", "requests_per_unit is missing"},
		{"negative requests_per_unit", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unit: second, requests_per_unit: -1}\n", "requests_per_unit -1 is out of range 0..4294967295"},
		{"requests_per_unit over uint32", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unit: second, requests_per_unit: 4294967296}\n", "out of range"},
		{"unlimited with unit", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unlimited: true, unit: second}\n", "an unlimited rate_limit must not set unit"},
		{"unlimited with rate", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unlimited: true, requests_per_unit: 5}\n", "an unlimited rate_limit must not set"},
		{"unlimited with multiplier", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unlimited: true, unit_multiplier: 2}\n", "an unlimited rate_limit must not set"},
		{"zero unit_multiplier", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 0}\n", "unit_multiplier 0 is out of range 1..4294967295"},
		{"unit_multiplier overflowing the window", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 1000}\n", "unit_multiplier 1000 is out of range 1..292 for unit year"},
		{"replaces with an empty name", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}\n", "replaces has an entry with an empty name"},
		{"replaces itself", "domain: d\ndescriptors:\n- key: a\n  rate_limit: {name: x, unit: second, requests_per_unit: 1, replaces: [{name: x}]}\n", `rate limit "x" replaces itself`},
		{"report without rate_limit", "domain: d\ndescriptors:\n- key: a\n  report: true\n", `descriptor "a": report needs a rate_limit`},
		{"report in shadow mode", "domain: d\ndescriptors:\n- key: a\n  report: true\n  shadow_mode: true\n  rate_limit: {unit: second, requests_per_unit: 1}\n", "report and shadow_mode exclude each other"},
		{"report unlimited", "domain: d\ndescriptors:\n- key: a\n  report: true\n  rate_limit: {unlimited: true}\n", "report needs a limit, not unlimited"},
		{"report not a bool", "domain: d\ndescriptors:\n- key: a\n  report: later\n  rate_limit: {unit: second, requests_per_unit: 1}\n", "cannot unmarshal !!str `later`"},
		{"error deep in the tree names the path", "domain: d\ndescriptors:\n- key: a\n  value: v\n  descriptors:\n  - key: b\n    descriptors:\n    - key: c\n      value: w*\n      rate_limit: {unit: eon, requests_per_unit: 1}\n", `descriptor "a=v > b > c=w*": unknown unit "eon"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse("test.yaml", []byte(tt.yaml))
			if rs != nil {
				t.Errorf("ruleset = %v, want nil", rs)
			}
			checkConfigError(t, err, "test.yaml: ", tt.want)
		})
	}
}

func TestParseRules(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want rule
	}{
		{"unit is case-insensitive", "unit: Minute\n  requests_per_unit: 7",
			rule{limit: 7, unit: rlsv3.RateLimitResponse_RateLimit_MINUTE, multiplier: 1, window: time.Minute}},
		{"zero blocks everything", "unit: second\n  requests_per_unit: 0",
			rule{limit: 0, unit: rlsv3.RateLimitResponse_RateLimit_SECOND, multiplier: 1, window: time.Second}},
		{"largest limit", "unit: day\n  requests_per_unit: 4294967295",
			rule{limit: 4294967295, unit: rlsv3.RateLimitResponse_RateLimit_DAY, multiplier: 1, window: 24 * time.Hour}},
		{"unit_multiplier", "unit: second\n  unit_multiplier: 90\n  requests_per_unit: 3",
			rule{limit: 3, unit: rlsv3.RateLimitResponse_RateLimit_SECOND, multiplier: 90, window: 90 * time.Second}},
		{"week", "unit: week\n  requests_per_unit: 1",
			rule{limit: 1, unit: rlsv3.RateLimitResponse_RateLimit_WEEK, multiplier: 1, window: 7 * 24 * time.Hour}},
		{"month is 30 days", "unit: month\n  requests_per_unit: 1",
			rule{limit: 1, unit: rlsv3.RateLimitResponse_RateLimit_MONTH, multiplier: 1, window: 30 * 24 * time.Hour}},
		{"year is 365 days, up to 292 of them", "unit: year\n  unit_multiplier: 292\n  requests_per_unit: 1",
			rule{limit: 1, unit: rlsv3.RateLimitResponse_RateLimit_YEAR, multiplier: 292, window: 292 * 365 * 24 * time.Hour}},
		{"unlimited", "unlimited: true",
			rule{unlimited: true, multiplier: 1}},
		{"name and replaces", "name: n\n  replaces: [{name: a}, {name: b}]\n  unit: hour\n  requests_per_unit: 1",
			rule{name: "n", replaces: []string{"a", "b"}, limit: 1, unit: rlsv3.RateLimitResponse_RateLimit_HOUR, multiplier: 1, window: time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse("test.yaml", []byte("domain: d\ndescriptors:\n- key: k\n  rate_limit:\n    "+
				strings.ReplaceAll(tt.yaml, "\n  ", "\n    ")+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			got := rs.domains["d"].root.match([]entry{{"k", "v"}})
			if got == nil {
				t.Fatal("no rule")
			}
			if got.name != tt.want.name || got.limit != tt.want.limit || got.unit != tt.want.unit ||
				got.multiplier != tt.want.multiplier || got.window != tt.want.window ||
				got.unlimited != tt.want.unlimited || got.shadow != tt.want.shadow || !slices.Equal(got.replaces, tt.want.replaces) {
				t.Errorf("rule = %+v, want %+v", *got, tt.want)
			}
		})
	}
}
