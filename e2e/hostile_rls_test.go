package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testpki"
)

// hostileRules limit each client address to 2 a minute; the file does not
// allow descriptor limits.
const hostileRules = `domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
`

// rlsAddr returns the address of n's RLS listener, from its log.
func rlsAddr(t *testing.T, n *node) string {
	t.Helper()
	for line := range strings.SplitSeq(n.logs(), "\n") {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "envoy rls listening" {
			return rec.Addr
		}
	}
	t.Fatalf("no \"envoy rls listening\" line in the log:\n%s", n.logs())
	return ""
}

// rlsClientAt dials addr with grpc-go, as Envoy does: h2c, or TLS with
// tlsCfg when it is not nil.
func rlsClientAt(t *testing.T, addr string, tlsCfg *tls.Config) rlsv3.RateLimitServiceClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// entryDesc is a descriptor of key=value pairs.
func entryDesc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// callRLS sends one ShouldRateLimit call, bounded in time.
func callRLS(c rlsv3.RateLimitServiceClient, domain string, ds ...*ratelimitv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
}

// TestHostileRLS sends calls over each cap of the Envoy RLS to a real
// server's --rls-addr listener: each gets InvalidArgument naming the cap,
// and none spends or creates a counter (the victim descriptor each carries
// still has its whole budget afterwards, and no other counter was made: a
// flood of distinct values is refused whole). A descriptor's own limit is
// ignored in a domain that does not allow it, and the API port no longer
// serves RLS.
func TestHostileRLS(t *testing.T) {
	n := start(t, nil, "--rls-config", writeFile(t, "rls.yaml", hostileRules), "--rls-addr", "127.0.0.1:0")
	c := rlsClientAt(t, rlsAddr(t, n), nil)
	victim := entryDesc("remote_address", "10.0.0.1")
	flood := []*ratelimitv3.RateLimitDescriptor{victim}
	for i := range 16383 {
		flood = append(flood, entryDesc("remote_address", fmt.Sprintf("10.1.%d.%d", i/256, i%256)))
	}
	year := entryDesc("remote_address", "10.0.0.1")
	year.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1 << 30, Unit: typev3.RateLimitUnit_YEAR}
	long := strings.Repeat("x", 513)
	for _, tc := range []struct {
		name   string
		domain string
		ds     []*ratelimitv3.RateLimitDescriptor
		want   string
	}{
		{"16384 descriptors", "edge", flood, "16384 descriptors, over the cap of 64 per call"},
		{"65 descriptors", "edge", flood[:65], "65 descriptors, over the cap of 64 per call"},
		{"9 entries", "edge", []*ratelimitv3.RateLimitDescriptor{victim, entryDesc("remote_address", "10.0.0.1", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5", "f", "6", "g", "7", "h", "8")}, "descriptor 1: 9 entries, over the cap of 8 per descriptor"},
		{"a 513-byte key", "edge", []*ratelimitv3.RateLimitDescriptor{victim, entryDesc(long, "v")}, "descriptor 1: entry 0: key is 513 bytes, over the cap of 512"},
		{"a 513-byte value", "edge", []*ratelimitv3.RateLimitDescriptor{victim, entryDesc("remote_address", long)}, `descriptor 1: entry 0 ("remote_address"): value is 513 bytes, over the cap of 512`},
		{"a 246-byte domain", strings.Repeat("d", 246), []*ratelimitv3.RateLimitDescriptor{victim}, "domain is 246 bytes, over the cap of 245"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := callRLS(c, tc.domain, tc.ds...)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("err = %v, want InvalidArgument containing %q", err, tc.want)
			}
		})
	}
	res, err := callRLS(c, "edge", year)
	if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK || res.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 2 || res.GetStatuses()[0].GetLimitRemaining() != 1 {
		t.Fatalf("the victim's first call, with a limit of its own (a domain that does not allow it): %v %v; want OK under the rule (2 a minute) with 1 left: the calls over the caps spent nothing", res, err)
	}
	if res, err := callRLS(c, "edge", flood[1]); err != nil || res.GetStatuses()[0].GetLimitRemaining() != 1 {
		t.Fatalf("a value of the refused flood: %v %v; want its first call (1 left): the flood made no counter", res, err)
	}
	if got := sampleSum(n.metrics(), "sluice_rls_requests_total", `outcome="invalid"`); got != 6 {
		t.Errorf("sluice_rls_requests_total{outcome=\"invalid\"} = %v, want 6", got)
	}
	if _, err := callRLS(rlsClientAt(t, n.hostPort(), nil), "edge", victim); status.Code(err) != codes.Unimplemented {
		t.Errorf("RLS on the API port with --rls-addr: %v, want Unimplemented (not served there)", err)
	}
}

// TestRLSListenerMutualTLS checks --rls-client-ca on --rls-addr: Envoy's
// certificate is required there, while the API port, without
// --tls-client-ca, takes clients without one.
func TestRLSListenerMutualTLS(t *testing.T) {
	p := newPKI(t)
	n := startNode(t, p, nil, "--rls-config", writeFile(t, "rls.yaml", hostileRules), "--rls-addr", "127.0.0.1:0", "--rls-client-ca", p.caFile)
	envoy := p.ca.Client(t, "envoy").TLS(t)
	stranger := testpki.NewCA(t, "other CA").Client(t, "stranger").TLS(t)
	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"Envoy's certificate", []tls.Certificate{envoy}, true},
		{"no certificate", nil, false},
		{"a certificate of another CA", []tls.Certificate{stranger}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rlsClientAt(t, rlsAddr(t, n), p.clientConfig(tc.certs...))
			if _, err := callRLS(c, "edge", entryDesc("remote_address", "10.2.2.2")); (err == nil) != tc.ok {
				t.Fatalf("gRPC: %v; want ok=%v", err, tc.ok)
			}
		})
	}
	if r := n.call("any", "limit", map[string]any{"namespace": "ns", "identifier": "u", "limit": 5, "duration": 60000}); r.Code != 200 {
		t.Errorf("the API port without a client certificate: %d %s, want 200", r.Code, r.Raw)
	}
}
