package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
)

var _ Limiter = (*sluice.Limiter)(nil)

// t0 is the fixed time of every test decision: 2030-01-02T03:04:05.006Z,
// 55m54.994s before the end of its hour.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)

func clock() time.Time { return t0 }

// testRules is the ruleset of most decision tests. It allows descriptor
// limits; strictRules is the same without.
const testRules = `
domain: d
allow_descriptor_limits: true
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: watch
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: window
    rate_limit: {name: ninety, unit: second, unit_multiplier: 90, requests_per_unit: 5}
  - key: tokens
    report: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

var strictRules = strings.Replace(testRules, "allow_descriptor_limits: true\n", "", 1)

// recordingLimiter passes decisions to a real limiter and records them.
type recordingLimiter struct {
	Limiter
	mu       sync.Mutex
	requests []sluice.Request
	calls    int
}

func (l *recordingLimiter) Ratelimit(ctx context.Context, r sluice.Request) (sluice.Response, error) {
	l.record(r)
	return l.Limiter.Ratelimit(ctx, r)
}

func (l *recordingLimiter) RatelimitMany(ctx context.Context, rs []sluice.Request) ([]sluice.Response, error) {
	l.record(rs...)
	return l.Limiter.RatelimitMany(ctx, rs)
}

func (l *recordingLimiter) ReportMany(ctx context.Context, rs []sluice.Request) ([]sluice.Response, error) {
	l.record(rs...)
	return l.Limiter.ReportMany(ctx, rs)
}

func (l *recordingLimiter) record(rs ...sluice.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	l.requests = append(l.requests, rs...)
}

// recordingObserver records outcomes as "domain/outcome".
type recordingObserver struct {
	mu  sync.Mutex
	got []string
}

func (o *recordingObserver) Decided(domain string, outcome Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, domain+"/"+string(outcome))
}

func (o *recordingObserver) outcomes() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

// harness is a service over a real in-memory limiter, all on clock t0.
type harness struct {
	svc     *Service
	limiter *recordingLimiter
	obs     *recordingObserver
	real    *sluice.Limiter
}

func newHarness(t testing.TB, rs *Ruleset) *harness {
	t.Helper()
	l, err := sluice.New(sluice.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := &harness{limiter: &recordingLimiter{Limiter: l}, obs: &recordingObserver{}, real: l}
	h.svc, err = New(Config{Limiter: h.limiter, Domains: rs, Observer: h.obs, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func mustLoad(t testing.TB, path string) *Ruleset {
	t.Helper()
	rs, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func mustParse(t testing.TB, rules string) *Ruleset {
	t.Helper()
	rs, err := Parse("test.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// desc builds a descriptor from "k=v,k2=v2".
func desc(kvs string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for kv := range strings.SplitSeq(kvs, ",") {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// withHits sets a descriptor's own hits_addend.
func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// withLimit sets a descriptor's limit override.
func withLimit(d *ratelimitv3.RateLimitDescriptor, n uint32, unit typev3.RateLimitUnit, multiplier uint32) *ratelimitv3.RateLimitDescriptor {
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
	if multiplier != 0 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(multiplier)
	}
	return d
}

// descs returns n descriptors user=u0, user=u1, …
func descs(n int) []*ratelimitv3.RateLimitDescriptor {
	out := make([]*ratelimitv3.RateLimitDescriptor, n)
	for i := range out {
		out[i] = desc(fmt.Sprintf("user=u%d", i))
	}
	return out
}

func req(domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits}
}

// summary renders a response for table comparisons, e.g.
// "OVER_LIMIT [OK 3/HOUR rem=2; OVER_LIMIT 1/HOUR rem=0]". Limits read
// N/UNIT, with xM for a unit_multiplier and (name) for a name.
func summary(res *rlsv3.RateLimitResponse) string {
	var sts []string
	for _, st := range res.GetStatuses() {
		s := st.GetCode().String()
		if l := st.GetCurrentLimit(); l != nil {
			s += fmt.Sprintf(" %d/%v", l.GetRequestsPerUnit(), l.GetUnit())
			if m := l.GetUnitMultiplier(); m != nil {
				s += fmt.Sprintf("x%d", m.GetValue())
			}
			if l.GetName() != "" {
				s += " (" + l.GetName() + ")"
			}
		}
		sts = append(sts, fmt.Sprintf("%s rem=%d", s, st.GetLimitRemaining()))
	}
	return res.GetOverallCode().String() + " [" + strings.Join(sts, "; ") + "]"
}

// A decisionStep is one call of a decision case and its summary.
type decisionStep struct {
	req  *rlsv3.RateLimitRequest
	want string
}

// A decisionCase is a sequence of calls on one service with its rules.
type decisionCase struct {
	name      string
	file      string // rules to load instead of testRules
	rules     string // rules to parse instead of testRules
	steps     []decisionStep
	outcomes  []string // default: not checked
	untouched bool     // the limiter must not be called
}

// decisionCases are TestDecisions' cases.
var decisionCases = []decisionCase{
	{name: "counts to the limit, then denies", steps: []decisionStep{
		{req("d", 0, desc("user=a")), "OK [OK 3/HOUR rem=2]"},
		{req("d", 0, desc("user=a")), "OK [OK 3/HOUR rem=1]"},
		{req("d", 0, desc("user=a")), "OK [OK 3/HOUR rem=0]"},
		{req("d", 0, desc("user=a")), "OVER_LIMIT [OVER_LIMIT 3/HOUR rem=0]"},
	}, outcomes: []string{"d/ok", "d/ok", "d/ok", "d/over_limit"}},
	{name: "each value has its own counter", steps: []decisionStep{
		{req("d", 0, desc("user=a")), "OK [OK 3/HOUR rem=2]"},
		{req("d", 0, desc("user=a")), "OK [OK 3/HOUR rem=1]"},
		{req("d", 0, desc("user=b")), "OK [OK 3/HOUR rem=2]"},
	}},
	{name: "all-or-nothing: a call denied on one descriptor spends nothing on the others", steps: []decisionStep{
		{req("d", 0, desc("user=a"), desc("ip=x")), "OK [OK 3/HOUR rem=2; OK 1/HOUR rem=0]"},
		{req("d", 0, desc("user=a"), desc("ip=x")), "OVER_LIMIT [OK 3/HOUR rem=2; OVER_LIMIT 1/HOUR rem=0]"},
		{req("d", 0, desc("user=a")), "OK [OK 3/HOUR rem=1]"},
	}, outcomes: []string{"d/ok", "d/over_limit", "d/ok"}},
	{name: "one counter twice in a call counts twice, all-or-nothing", steps: []decisionStep{
		{req("d", 0, desc("ip=x"), desc("ip=x")), "OVER_LIMIT [OK 1/HOUR rem=1; OVER_LIMIT 1/HOUR rem=1]"},
		{req("d", 0, desc("ip=x")), "OK [OK 1/HOUR rem=0]"},
	}},
	{name: "request hits_addend is the cost, 0 means 1", steps: []decisionStep{
		{req("d", 2, desc("user=a")), "OK [OK 3/HOUR rem=1]"},
		{req("d", 2, desc("user=a")), "OVER_LIMIT [OVER_LIMIT 3/HOUR rem=1]"},
		{req("d", 0, desc("user=a")), "OK [OK 3/HOUR rem=0]"},
	}},
	{name: "descriptor hits_addend beats the request's, 0 checks without spending", steps: []decisionStep{
		{req("d", 3, withHits(desc("user=a"), 1)), "OK [OK 3/HOUR rem=2]"},
		{req("d", 3, withHits(desc("user=a"), 0)), "OK [OK 3/HOUR rem=2]"},
		{req("d", 1, withHits(desc("user=a"), 3)), "OVER_LIMIT [OVER_LIMIT 3/HOUR rem=2]"},
	}},
	{name: "unlimited answers OK without the limiter", untouched: true, steps: []decisionStep{
		{req("d", 0, desc("free=x")), "OK [OK rem=4294967295]"},
		{req("d", 9, desc("free=x")), "OK [OK rem=4294967295]"},
	}, outcomes: []string{"d/ok", "d/ok"}},
	{name: "unmatched descriptors are OK with no limit", untouched: true, steps: []decisionStep{
		{req("d", 0, desc("nothing=x")), "OK [OK rem=0]"},
		{req("d", 0, desc("user=a,extra=b")), "OK [OK rem=0]"},
	}},
	{name: "unknown domain: everything is OK", untouched: true, steps: []decisionStep{
		{req("other", 0, desc("user=a")), "OK [OK rem=0]"},
	}, outcomes: []string{"/ok"}},
	{name: "shadow mode counts but never denies", steps: []decisionStep{
		{req("d", 0, desc("watch=w")), "OK [OK 2/HOUR rem=1]"},
		{req("d", 0, desc("watch=w")), "OK [OK 2/HOUR rem=0]"},
		{req("d", 0, desc("watch=w")), "OK [OK 2/HOUR rem=0]"},
	}, outcomes: []string{"d/ok", "d/ok", "d/shadow_over_limit"}},
	{name: "a denied call spends nothing on shadow descriptors", steps: []decisionStep{
		{req("d", 0, desc("ip=x"), desc("watch=w")), "OK [OK 1/HOUR rem=0; OK 2/HOUR rem=1]"},
		{req("d", 0, desc("ip=x"), desc("watch=w")), "OVER_LIMIT [OVER_LIMIT 1/HOUR rem=0; OK 2/HOUR rem=1]"},
		{req("d", 0, desc("watch=w")), "OK [OK 2/HOUR rem=0]"},
	}, outcomes: []string{"d/ok", "d/over_limit", "d/ok"}},
	{name: "mixed statuses keep the request's order", steps: []decisionStep{
		{req("d", 0, desc("nothing=x"), desc("free=y"), desc("user=a"), desc("watch=w")),
			"OK [OK rem=0; OK rem=4294967295; OK 3/HOUR rem=2; OK 2/HOUR rem=1]"},
	}},
	{name: "requests_per_unit 0 blocks everything", steps: []decisionStep{
		{req("d", 0, desc("blocked=x")), "OVER_LIMIT [OVER_LIMIT 0/HOUR rem=0]"},
	}},
	{name: "unit_multiplier and name are reported", steps: []decisionStep{
		{req("d", 0, desc("window=x")), "OK [OK 5/SECONDx90 (ninety) rem=4]"},
	}},
	{name: "a descriptor's own limit overrides the rules", steps: []decisionStep{
		{req("d", 0, withLimit(desc("user=a"), 2, typev3.RateLimitUnit_MINUTE, 0)), "OK [OK 2/MINUTE rem=1]"},
		{req("d", 0, withLimit(desc("nothing=a"), 2, typev3.RateLimitUnit_DAY, 3)), "OK [OK 2/DAYx3 rem=1]"},
		{req("d", 0, desc("user=a")), "OK [OK 3/HOUR rem=2]"},
	}},
	{name: "a descriptor's own limit needs a known domain", untouched: true, steps: []decisionStep{
		{req("other", 0, withLimit(desc("user=a"), 2, typev3.RateLimitUnit_MINUTE, 0)), "OK [OK rem=0]"},
		{req("other", 0, withLimit(desc("user=a"), 1, typev3.RateLimitUnit_UNKNOWN, 0)), "OK [OK rem=0]"},
	}},
	{name: "a descriptor's own limit is ignored where the domain does not allow it", rules: strictRules, steps: []decisionStep{
		{req("d", 0, withLimit(desc("user=a"), 1000, typev3.RateLimitUnit_YEAR, 200)), "OK [OK 3/HOUR rem=2]"},
		{req("d", 0, withLimit(desc("user=a"), 1, typev3.RateLimitUnit_UNKNOWN, 0)), "OK [OK 3/HOUR rem=1]"},
		{req("d", 0, withLimit(desc("nothing=a"), 2, typev3.RateLimitUnit_MINUTE, 0)), "OK [OK rem=0]"},
	}},
	{name: "report: hits count past the limit, never OVER_LIMIT; 0 hits check the limit", steps: []decisionStep{
		{req("d", 0, withHits(desc("tokens=t"), 0)), "OK [OK 1000/HOUR rem=1000]"},
		{req("d", 0, withHits(desc("tokens=t"), 900)), "OK [OK 1000/HOUR rem=100]"},
		{req("d", 0, withHits(desc("tokens=t"), 300)), "OK [OK 1000/HOUR rem=0]"},
		{req("d", 0, withHits(desc("tokens=t"), 0)), "OVER_LIMIT [OVER_LIMIT 1000/HOUR rem=0]"},
		{req("d", 5, desc("tokens=t")), "OK [OK 1000/HOUR rem=0]"},
	}, outcomes: []string{"d/ok", "d/reported", "d/reported", "d/over_limit", "d/reported"}},
	{name: "a call denied on another descriptor still counts its reports", steps: []decisionStep{
		{req("d", 0, desc("ip=x"), withHits(desc("tokens=u"), 10)), "OK [OK 1/HOUR rem=0; OK 1000/HOUR rem=990]"},
		{req("d", 0, desc("ip=x"), withHits(desc("tokens=u"), 10)), "OVER_LIMIT [OVER_LIMIT 1/HOUR rem=0; OK 1000/HOUR rem=980]"},
		{req("d", 0, withHits(desc("tokens=u"), 0)), "OK [OK 1000/HOUR rem=980]"},
	}, outcomes: []string{"d/ok", "d/over_limit", "d/ok"}},
	{name: "a report rule's descriptor with its own limit still reports", steps: []decisionStep{
		{req("d", 0, withLimit(withHits(desc("tokens=v"), 50), 10, typev3.RateLimitUnit_MINUTE, 0)), "OK [OK 10/MINUTE rem=0]"},
		{req("d", 0, withLimit(withHits(desc("tokens=v"), 0), 10, typev3.RateLimitUnit_MINUTE, 0)), "OVER_LIMIT [OVER_LIMIT 10/MINUTE rem=0]"},
	}, outcomes: []string{"d/reported", "d/over_limit"}},
	{name: "replaces drops the replaced limit from the call", file: "testdata/examples/7-replaces.yaml", steps: []decisionStep{
		{req("example7", 0, desc("key_1=value_1,user=alice")), "OK [OK 5/SECOND (specific_limit) rem=4]"},
		{req("example7", 0, desc("key_1=value_1,user=alice"), desc("key_2=value_2,user=alice")), "OK [OK rem=0; OK 10/SECOND rem=9]"},
		{req("example7", 0, desc("key_1=value_1,user=alice")), "OK [OK 5/SECOND (specific_limit) rem=3]"},
	}},
}

// TestDecisions runs each of decisionCases on a service of its own.
func TestDecisions(t *testing.T) {
	for _, tt := range decisionCases {
		t.Run(tt.name, func(t *testing.T) {
			rs := mustParse(t, testRules)
			switch {
			case tt.file != "":
				rs = mustLoad(t, tt.file)
			case tt.rules != "":
				rs = mustParse(t, tt.rules)
			}
			h := newHarness(t, rs)
			for i, s := range tt.steps {
				res, err := h.svc.ShouldRateLimit(t.Context(), s.req)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := summary(res); got != s.want {
					t.Errorf("step %d:\n got %s\nwant %s", i, got, s.want)
				}
			}
			if tt.outcomes != nil && !slices.Equal(h.obs.outcomes(), tt.outcomes) {
				t.Errorf("outcomes = %q, want %q", h.obs.outcomes(), tt.outcomes)
			}
			if tt.untouched && h.limiter.calls != 0 {
				t.Errorf("the limiter was called %d times", h.limiter.calls)
			}
		})
	}
}

func TestDurationUntilReset(t *testing.T) {
	// Windows are aligned to the Unix epoch, so t0 = 2030-01-02T03:04:05.006Z
	// (a Wednesday; epoch weeks start on Thursday) is this far from each reset.
	tests := []struct {
		unit string
		want time.Duration
	}{
		{"unit: second", 994 * time.Millisecond},
		{"unit: minute", 54*time.Second + 994*time.Millisecond},
		{"unit: hour", 55*time.Minute + 54*time.Second + 994*time.Millisecond},
		{"unit: day", 20*time.Hour + 55*time.Minute + 54*time.Second + 994*time.Millisecond},
		{"unit: week", 20*time.Hour + 55*time.Minute + 54*time.Second + 994*time.Millisecond},
		{"unit: second, unit_multiplier: 90", 24*time.Second + 994*time.Millisecond},
		{"unit: month", 332*time.Hour + 55*time.Minute + 54*time.Second + 994*time.Millisecond},
		{"unit: year", 8372*time.Hour + 55*time.Minute + 54*time.Second + 994*time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.unit, func(t *testing.T) {
			h := newHarness(t, mustParse(t, "domain: d\ndescriptors:\n- key: k\n  rate_limit: {requests_per_unit: 1, "+tt.unit+"}\n"))
			res, err := h.svc.ShouldRateLimit(t.Context(), req("d", 0, desc("k=v")))
			if err != nil {
				t.Fatal(err)
			}
			if got := res.GetStatuses()[0].GetDurationUntilReset().AsDuration(); got != tt.want {
				t.Errorf("duration_until_reset = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestInvalidArgument(t *testing.T) {
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"nil request", nil, "domain is empty"},
		{"empty domain", req("", 0, desc("user=a")), "domain is empty"},
		{"no descriptors", req("d", 0), "descriptors are empty"},
		{"nil descriptor", req("d", 0, desc("user=a"), nil), "descriptor 1: entries are empty"},
		{"descriptor without entries", req("d", 0, &ratelimitv3.RateLimitDescriptor{}), "descriptor 0: entries are empty"},
		{"nil entry", req("d", 0, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{nil}}), "descriptor 0: entry 0: key is empty"},
		{"empty key", req("d", 0, desc("user=a,=b")), "descriptor 0: entry 1: key is empty"},
		{"empty value", req("d", 0, desc("user=")), `descriptor 0: entry 0 ("user"): value is empty`},
		{"empty value in an unknown domain", req("other", 0, desc("user=")), "value is empty"},
		{"negative hits", req("d", 0, &ratelimitv3.RateLimitDescriptor{Entries: desc("user=a").Entries, IsNegativeHits: true}), "is_negative_hits is not supported"},
		{"hits_addend too large", req("d", 0, withHits(desc("user=a"), math.MaxInt64+1)), "hits_addend 9223372036854775808 is too large"},
		{"override without a unit", req("d", 0, withLimit(desc("user=a"), 1, typev3.RateLimitUnit_UNKNOWN, 0)), "descriptor 0: limit: unit UNKNOWN is not supported"},
		{"override with an undefined unit", req("d", 0, withLimit(desc("user=a"), 1, typev3.RateLimitUnit(42), 0)), "unit 42 is not supported"},
		{"override with an overflowing window", req("d", 0, withLimit(desc("user=a"), 1, typev3.RateLimitUnit_YEAR, 293)), "unit_multiplier 293 is out of range"},
		{"override of a year", req("d", 0, withLimit(desc("user=a"), 1, typev3.RateLimitUnit_YEAR, 0)), "descriptor 0: limit: a window of 8760h0m0s is over the cap of 720h0m0s (30 days)"},
		{"override of 31 days", req("d", 0, withLimit(desc("user=a"), 1, typev3.RateLimitUnit_DAY, 31)), "over the cap of 720h0m0s (30 days)"},
		{"too many descriptors", req("d", 0, descs(MaxDescriptors+1)...), "65 descriptors, over the cap of 64 per call"},
		{"16384 descriptors", req("d", 0, descs(16384)...), "16384 descriptors, over the cap of 64 per call"},
		{"too many entries", req("d", 0, desc("a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,user=9")), "descriptor 0: 9 entries, over the cap of 8 per descriptor"},
		{"a key too long", req("d", 0, desc("user=a"), desc(strings.Repeat("k", MaxEntryBytes+1)+"=v")), "descriptor 1: entry 0: key is 513 bytes, over the cap of 512"},
		{"a value too long", req("d", 0, desc("user="+strings.Repeat("v", MaxEntryBytes+1))), `descriptor 0: entry 0 ("user"): value is 513 bytes, over the cap of 512`},
		{"a domain too long", req(strings.Repeat("d", MaxDomainBytes+1), 0, desc("user=a")), "domain is 246 bytes, over the cap of 245"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, mustParse(t, testRules))
			_, err := h.svc.ShouldRateLimit(t.Context(), tt.req)
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want invalid_argument containing %q", err, tt.want)
			}
			if h.limiter.calls != 0 {
				t.Errorf("the limiter was called %d times", h.limiter.calls)
			}
			if got := h.obs.outcomes(); len(got) != 1 || !strings.HasSuffix(got[0], "/invalid") {
				t.Errorf("outcomes = %q, want one invalid", got)
			}
		})
	}
	t.Run("a zero unit_multiplier wrapper is rejected", func(t *testing.T) {
		h := newHarness(t, mustParse(t, testRules))
		d := withLimit(desc("user=a"), 1, typev3.RateLimitUnit_SECOND, 0)
		d.Limit.UnitMultiplier = wrapperspb.UInt32(0)
		_, err := h.svc.ShouldRateLimit(t.Context(), req("d", 0, d))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "unit_multiplier 0 is out of range") {
			t.Fatalf("err = %v", err)
		}
	})
}

// failingLimiter fails every decision with err, or answers with too few
// responses when err is nil.
type failingLimiter struct{ err error }

func (l failingLimiter) Ratelimit(context.Context, sluice.Request) (sluice.Response, error) {
	if l.err == nil {
		return sluice.Response{Success: true}, nil
	}
	return sluice.Response{}, l.err
}

func (l failingLimiter) RatelimitMany(context.Context, []sluice.Request) ([]sluice.Response, error) {
	return nil, l.err
}

func (l failingLimiter) ReportMany(context.Context, []sluice.Request) ([]sluice.Response, error) {
	return nil, l.err
}

func TestLimiterErrors(t *testing.T) {
	closed, err := sluice.New(sluice.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	invalid := fmt.Errorf("%w: something", sluice.ErrInvalidRequest)
	tests := []struct {
		name    string
		limiter Limiter
		req     *rlsv3.RateLimitRequest
		code    connect.Code
		outcome string
	}{
		{"closed limiter, enforced", closed, req("d", 0, desc("user=a")), connect.CodeUnavailable, "d/unavailable"},
		{"closed limiter, shadow", closed, req("d", 0, desc("watch=a")), connect.CodeUnavailable, "d/unavailable"},
		{"invalid request", failingLimiter{invalid}, req("d", 0, desc("user=a")), connect.CodeInvalidArgument, "d/invalid"},
		{"short answer", failingLimiter{}, req("d", 0, desc("user=a")), connect.CodeUnavailable, "d/unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := &recordingObserver{}
			svc, err := New(Config{Limiter: tt.limiter, Domains: mustParse(t, testRules), Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := svc.ShouldRateLimit(t.Context(), tt.req); connect.CodeOf(err) != tt.code {
				t.Fatalf("err = %v, want %v", err, tt.code)
			}
			if got := obs.outcomes(); !slices.Equal(got, []string{tt.outcome}) {
				t.Errorf("outcomes = %q, want %q", got, tt.outcome)
			}
		})
	}
	t.Run("closed limiter error is wrapped", func(t *testing.T) {
		svc, err := New(Config{Limiter: closed, Domains: mustParse(t, testRules)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = svc.ShouldRateLimit(t.Context(), req("d", 0, desc("user=a")))
		if !errors.Is(err, sluice.ErrClosed) {
			t.Errorf("err = %v, want it to wrap sluice.ErrClosed", err)
		}
		if msg := connect.CodeOf(err).String() + ": " + errUnavailable.Error(); err.Error() != msg {
			t.Errorf("err = %q, want %q: the wire carries no cause", err, msg)
		}
	})
}

func TestRequestsToLimiter(t *testing.T) {
	h := newHarness(t, mustParse(t, testRules))
	_, err := h.svc.ShouldRateLimit(t.Context(), req("d", 2,
		desc("user=a"), withHits(desc("window=b"), 0), desc("free=c"), desc("watch=d")))
	if err != nil {
		t.Fatal(err)
	}
	want := []sluice.Request{ // the enforced batch in request order, then shadow
		{Workspace: WorkspaceOf("d"), Namespace: "d", Identifier: "4:user1:a", Limit: 3, Duration: time.Hour, Cost: 2, Time: t0},
		{Workspace: WorkspaceOf("d"), Namespace: "d", Identifier: "6:window1:b", Limit: 5, Duration: 90 * time.Second, Cost: 0, Time: t0},
		{Workspace: WorkspaceOf("d"), Namespace: "d", Identifier: "5:watch1:d", Limit: 2, Duration: time.Hour, Cost: 2, Time: t0},
	}
	if len(h.limiter.requests) != len(want) {
		t.Fatalf("requests = %+v, want %+v", h.limiter.requests, want)
	}
	for i, r := range h.limiter.requests {
		if !r.Time.Equal(t0) {
			t.Errorf("request %d: time %v, want %v", i, r.Time, t0)
		}
		r.Time = t0
		if r != want[i] {
			t.Errorf("request %d = %+v, want %+v", i, r, want[i])
		}
	}
	if h.limiter.calls != 2 {
		t.Errorf("limiter calls = %d, want 2 (one batch, one shadow)", h.limiter.calls)
	}
	if !strings.Contains(Workspace, " ") {
		t.Errorf("Workspace %q has no space: an HTTP API root key could name it", Workspace)
	}
}

func TestSetRuleset(t *testing.T) {
	h := newHarness(t, mustParse(t, testRules))
	call := func() string {
		t.Helper()
		res, err := h.svc.ShouldRateLimit(t.Context(), req("d", 0, desc("user=z")))
		if err != nil {
			t.Fatal(err)
		}
		return summary(res)
	}
	if got, want := call(), "OK [OK 3/HOUR rem=2]"; got != want {
		t.Fatalf("before: %s, want %s", got, want)
	}
	h.svc.SetRuleset(mustParse(t, "domain: d\ndescriptors:\n- key: user\n  rate_limit: {unit: hour, requests_per_unit: 10}\n"))
	if got, want := call(), "OK [OK 10/HOUR rem=8]"; got != want { // same counter, new limit
		t.Fatalf("after: %s, want %s", got, want)
	}
	h.svc.SetRuleset(nil)
	if got, want := call(), "OK [OK 10/HOUR rem=7]"; got != want {
		t.Fatalf("after SetRuleset(nil): %s, want %s", got, want)
	}
	if got := h.svc.Ruleset().Domains(); !slices.Equal(got, []string{"d"}) {
		t.Errorf("Ruleset().Domains() = %q", got)
	}

	t.Run("concurrent with calls", func(t *testing.T) {
		a, b := mustParse(t, testRules), mustLoad(t, "testdata/examples")
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 200 {
					if _, err := h.svc.ShouldRateLimit(t.Context(), req("d", 0, desc("user=c"), desc("ip=d"))); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Go(func() {
			for i := range 200 {
				h.svc.SetRuleset([]*Ruleset{a, b}[i%2])
			}
		})
		wg.Wait()
	})
}

func TestConfig(t *testing.T) {
	rs := mustParse(t, testRules)
	lim := failingLimiter{}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"minimal", Config{Limiter: lim, Domains: rs}, ""},
		{"no limiter", Config{Domains: rs}, "rls: invalid config: Limiter is nil"},
		{"no rules", Config{Limiter: lim}, "rls: invalid config: Domains is nil"},
		{"negative message size", Config{Limiter: lim, Domains: rs, MaxMessageBytes: -1}, "rls: invalid config: MaxMessageBytes is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			s, newErr := New(tt.cfg)
			if tt.want == "" {
				if err != nil || newErr != nil {
					t.Fatalf("Validate() = %v, New() = %v", err, newErr)
				}
				if s.cfg.Logger == nil || s.cfg.Observer == nil || s.cfg.Clock == nil || s.cfg.MaxMessageBytes != DefaultMaxMessageBytes {
					t.Errorf("defaults not applied: %+v", s.cfg)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || err.Error() != tt.want {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
			if s != nil || !errors.Is(newErr, ErrInvalidConfig) {
				t.Errorf("New() = %v, %v", s, newErr)
			}
		})
	}
}
