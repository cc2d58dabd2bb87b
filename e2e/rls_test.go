package e2e

import (
	"context"
	"crypto/tls"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const rlsRules = `domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: path
    value: /health
    rate_limit:
      unlimited: true
`

// rlsClient dials n's --http-addr with the real grpc-go client, as Envoy
// does: h2c, or TLS with tlsCfg when it is not nil.
func rlsClient(t *testing.T, n *node, tlsCfg *tls.Config) rlsv3.RateLimitServiceClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	conn, err := grpc.NewClient(n.hostPort(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func shouldRateLimit(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, entries ...string) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(entries); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
}

// TestEnvoyRLS serves Envoy RLS from the real binary on the HTTP API's port
// and calls it with grpc-go, over h2c and over TLS: decisions, invalid
// input, metrics, and a reload on SIGHUP (a broken file keeps the rules in
// force; over TLS the same signals reload the certificate too).
func TestEnvoyRLS(t *testing.T) {
	t.Run("h2c", func(t *testing.T) { testEnvoyRLS(t, nil) })
	t.Run("tls", func(t *testing.T) { testEnvoyRLS(t, newPKI(t)) })
}

func testEnvoyRLS(t *testing.T, p *pki) {
	rules := writeFile(t, "rls.yaml", rlsRules)
	n := startNode(t, p, nil, "--rls-config", rules)
	var tlsCfg *tls.Config
	if p != nil {
		tlsCfg = p.clientConfig()
	}
	c := rlsClient(t, n, tlsCfg)

	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		res, err := shouldRateLimit(t, c, "edge", "remote_address", "10.0.0.1")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		st := res.GetStatuses()
		if res.GetOverallCode() != want || len(st) != 1 || st[0].GetCurrentLimit().GetRequestsPerUnit() != 2 ||
			st[0].GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st[0].GetLimitRemaining() != uint32(max(0, 1-i)) {
			t.Fatalf("call %d: %v, want %v with remaining %d", i, res, want, max(0, 1-i))
		}
		if d := st[0].GetDurationUntilReset().AsDuration(); d <= 0 || d > time.Minute {
			t.Fatalf("call %d: duration_until_reset %v", i, d)
		}
	}
	if res, err := shouldRateLimit(t, c, "edge", "remote_address", "10.0.0.2"); err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("another address: %v, %v", res, err)
	}
	for range 5 {
		if res, err := shouldRateLimit(t, c, "edge", "path", "/health"); err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("unlimited: %v, %v", res, err)
		}
	}
	if res, err := shouldRateLimit(t, c, "unknown", "remote_address", "10.0.0.1"); err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("unknown domain: %v, %v", res, err)
	}
	if _, err := shouldRateLimit(t, c, "", "remote_address", "10.0.0.1"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty domain: %v, want InvalidArgument", err)
	}
	if r := n.do("GET", "/v2/liveness", "", "", nil); r.Code != 200 {
		t.Fatalf("the HTTP API on the same port: %d", r.Code)
	}
	metrics := n.metrics()
	for _, want := range []string{
		`sluice_rls_requests_total{domain="edge",outcome="over_limit"} 1`,
		`sluice_rls_requests_total{domain="",outcome="ok"} 1`,
		`sluice_rls_requests_total{domain="",outcome="invalid"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// A broken file is refused and the rules in force stay.
	if err := os.WriteFile(rules, []byte("domain: edge\ndescriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hangup(t, n, `sluice_rls_config_reloads_total{result="error"} 1`)
	if res, _ := shouldRateLimit(t, c, "edge", "remote_address", "10.0.0.1"); res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after a failed reload: %v, want the old rules (OVER_LIMIT)", res)
	}
	// A good file replaces the rules: a higher limit on the same counter.
	if err := os.WriteFile(rules, []byte(strings.Replace(rlsRules, "requests_per_unit: 2", "requests_per_unit: 100", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	hangup(t, n, `sluice_rls_config_reloads_total{result="ok"} 1`)
	res, err := shouldRateLimit(t, c, "edge", "remote_address", "10.0.0.1")
	if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK || res.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 100 {
		t.Fatalf("after reload: %v, %v; want OK under the new limit of 100", res, err)
	}
	if m := n.metrics(); p != nil && !strings.Contains(m, `sluice_tls_reloads_total{result="ok"} 2`) {
		t.Errorf("the two SIGHUPs did not both reload the certificate: %s", grepLines(m, "sluice_tls_reloads_total"))
	}
}

// hangup sends SIGHUP to n and waits until its metrics show want.
func hangup(t *testing.T, n *node, want string) {
	t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(n.metrics(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after SIGHUP:\n%s", want, n.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
