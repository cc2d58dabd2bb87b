package rls

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
)

// FuzzParse feeds arbitrary YAML to the loader: it must never panic, and it
// either loads one domain or fails with ErrInvalidConfig.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/examples/*")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("domain: d\ndescriptors:\n- key: a\n  value: '*'\n  rate_limit: {unit: year, unit_multiplier: 292, requests_per_unit: 0}\n"))
	f.Add([]byte("domain: d\ndescriptors: [{key: a, descriptors: [{key: b, rate_limit: {unlimited: true, replaces: [{name: x}]}}]}]"))
	f.Add([]byte("domain: &a d\ndescriptors: *a\n"))
	f.Add([]byte("domain: d\ndescriptors:\n- key: tokens\n  report: true\n  rate_limit: {unit: hour, requests_per_unit: 1000}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := Parse("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			return
		}
		if len(rs.Domains()) != 1 {
			t.Fatalf("domains = %q, want one", rs.Domains())
		}
		root := rs.domains[rs.Domains()[0]].root
		for _, es := range [][]entry{{{"a", "b"}}, {{"a", "b"}, {"c", "d"}}, {{"key", "value*"}}} {
			root.match(es)
		}
	})
}

// FuzzShouldRateLimit feeds arbitrary wire-format requests to the service
// over a real limiter: it must never panic, and it either answers one
// status per descriptor or rejects the request with InvalidArgument.
func FuzzShouldRateLimit(f *testing.F) {
	seeds := []*rlsv3.RateLimitRequest{
		req("d", 0, desc("user=a")),
		req("d", 7, desc("user=a"), desc("ip=b"), desc("watch=c"), desc("free=d"), desc("window=e"), desc("none=f")),
		req("d", 0, withHits(desc("user=a"), 0), withLimit(desc("x=y"), 3, typev3.RateLimitUnit_YEAR, 292)),
		req("d", 0, withHits(desc("tokens=a"), 900), desc("ip=b"), withHits(desc("tokens=a"), 0)),
		req("d", 0, &ratelimitv3.RateLimitDescriptor{Entries: desc("user=a").Entries, IsNegativeHits: true}),
		req("", 0),
		req("other", 1, desc("a=b,c=d")),
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	h := newHarness(f, mustParse(f, testRules))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r rlsv3.RateLimitRequest
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		res, err := h.svc.ShouldRateLimit(t.Context(), &r)
		if err != nil {
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("err = %v, want invalid_argument", err)
			}
			return
		}
		if len(res.GetStatuses()) != len(r.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(res.GetStatuses()), len(r.GetDescriptors()))
		}
		if _, err := proto.Marshal(res); err != nil {
			t.Fatalf("response does not marshal: %v", err)
		}
	})
}
