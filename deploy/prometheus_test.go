package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testenv"
)

// notInRedisMode are the dashboard's queries that return no data from two
// nodes on one Redis, healthy, without a global layer: each is a panel
// title, a metric of the query ("" for every query of the panel) and why.
// TestPrometheus still evaluates them, and fails for an entry that matches
// no query.
var notInRedisMode = []struct{ panel, metric, reason string }{
	{"Origin errors", "", "failed origin reads, replays and Redis calls only: Redis stays up (TestDashboard cuts it)"},
	{"Breaker state", "sluice_global_breaker_state", "the MySQL global store's breaker: no global layer"},
	{"Dropped increments", "", "increments dropped only when Redis is out for a window (TestDashboard cuts it)"},
	{"Members", "", "--origin=cluster only"},
	{"Peer RPCs by outcome", "", "--origin=cluster only"},
	{"Peer RPC latency p99", "", "--origin=cluster only"},
	{"Refused peer calls", "", "--origin=cluster only"},
	{"Ring changes and seeded cells", "", "--origin=cluster only"},
	{"Exceed broadcasts", "", "--origin=cluster only"},
	{"Global rounds by outcome", "", "no global layer"},
	{"Global round duration (lag) p50 / p99", "", "no global layer"},
	{"Global store errors and regions", "", "no global layer"},
	{"Global rows by kind", "", "no global layer"},
}

// dashboardQuery is one query of the dashboard, its Grafana variables
// replaced, and why it may return no data ("" when it must).
type dashboardQuery struct {
	panel, expr, exempt string
}

// dashboardQueries returns the dashboard's queries with $__rate_interval
// at 10s (Prometheus scrapes every second) and every namespace and
// instance; it fails t for an entry of notInRedisMode that matches none.
func dashboardQueries(t *testing.T) []dashboardQuery {
	t.Helper()
	vars := strings.NewReplacer("$__rate_interval", "10s", "$namespace", ".*", "$instance", ".*")
	used := make([]bool, len(notInRedisMode))
	var out []dashboardQuery
	for _, p := range loadDashboard(t) {
		for _, q := range p.Targets {
			dq := dashboardQuery{panel: p.Title, expr: vars.Replace(q.Expr)}
			for i, e := range notInRedisMode {
				if e.panel == p.Title && strings.Contains(q.Expr, e.metric) {
					dq.exempt, used[i] = e.reason, true
				}
			}
			out = append(out, dq)
		}
	}
	for i, e := range notInRedisMode {
		if !used[i] {
			t.Errorf("notInRedisMode: panel %q, metric %q matches no query of the dashboard", e.panel, e.metric)
		}
	}
	return out
}

// TestPrometheus runs a real Prometheus (Debian's package prometheus) on
// a free loopback port, with a configuration and a storage folder of the
// test's, scraping every second the admin listeners of two `sluice serve`
// on one Redis under load, and loading alerts.yaml. Every query of the
// dashboard is evaluated through /api/v1/query: any error fails, and so
// does a query that returns no data within 60 s unless notInRedisMode
// exempts it. Every alert rule must have been evaluated without error and
// none may fire. It skips without prometheus, or fails when CI is set.
func TestPrometheus(t *testing.T) {
	prom := toolPath(t, "prometheus", prometheusInstall)
	queries := dashboardQueries(t)
	nodes := startRedisNodes(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var failed atomic.Int64
	var lastErr atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		driveNodes(ctx, nodes, func(err error) { failed.Add(1); lastErr.Store(err.Error()) })
	}()
	defer func() {
		cancel()
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Errorf("the load had %d failed calls; the last: %v", n, lastErr.Load())
		}
	}()
	api := startPrometheus(t, prom, nodes)
	waitQuery(t, api, `count(up{job="sluice"} == 1) == 2`, 30*time.Second)
	checkDashboardQueries(t, api, queries, 60*time.Second)
	checkLoadedRules(t, api, 30*time.Second)
}

// redisNode is one `sluice serve` of the test: its process, API and Envoy
// RLS addresses ("" without RLS).
type redisNode struct {
	*proc
	api, rls string
}

// startRedisNodes starts two nodes of one region on the test's Redis; the
// first also serves Envoy RLS and holds at most 64 cells (the load evicts).
func startRedisNodes(t *testing.T) []redisNode {
	t.Helper()
	redis := testenv.RedisAddr(t)
	dir := t.TempDir()
	ws := fmt.Sprintf("prom-%d", time.Now().UnixNano())
	keys, rules := filepath.Join(dir, "root-keys"), filepath.Join(dir, "rls.yaml")
	writeFile(t, keys, rk+":"+ws+"\n")
	writeFile(t, rules, rlsRules)
	var nodes []redisNode
	for i := range 2 {
		httpPort, adminPort := freePort(t), freePort(t)
		n := redisNode{api: "http://127.0.0.1:" + strconv.Itoa(httpPort)}
		args := []string{"serve", "--http-addr=127.0.0.1:" + strconv.Itoa(httpPort), "--admin-addr=127.0.0.1:" + strconv.Itoa(adminPort),
			"--data-dir=" + filepath.Join(dir, strconv.Itoa(i)), "--region=" + ws,
			"--origin=redis", "--redis-url=redis://" + redis, "--root-key-file=" + keys}
		if i == 0 {
			n.rls = "127.0.0.1:" + strconv.Itoa(freePort(t))
			args = append(args, "--max-counters=64", "--rls-config="+rules, "--rls-addr="+n.rls)
		}
		n.proc = startSluice(t, adminPort, nil, args...)
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.waitStatus(t, "/readyz", http.StatusOK, 30*time.Second)
	}
	return nodes
}

// driveNodes sends each node, about 25 times a second until ctx is done,
// a passing call, a call over its limit, a call on a new identity (a cold
// counter, read from Redis; past the first node's 64 cells, evictions),
// and every tenth round a call with a wrong root key and an Envoy RLS
// call; report gets each call that failed.
func driveNodes(ctx context.Context, nodes []redisNode, report func(error)) {
	client := &http.Client{Timeout: 5 * time.Second}
	var rls rlsv3.RateLimitServiceClient
	if conn, err := grpc.NewClient(nodes[0].rls, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		report(err)
	} else {
		defer conn.Close()
		rls = rlsv3.NewRateLimitServiceClient(conn)
	}
	type call struct {
		key, id     string
		limit, want int
	}
	for round := 0; ctx.Err() == nil; round++ {
		calls := []call{
			{rk, "steady-" + strconv.Itoa(round%20), 1_000_000, http.StatusOK},
			{rk, "hot", 1, http.StatusOK}, // denied after the first: 200 with success false
			{rk, "new-" + strconv.Itoa(round), 100, http.StatusOK},
		}
		if round%10 == 0 {
			calls = append(calls, call{"not-a-root-key-at-all", "x", 1, http.StatusUnauthorized})
		}
		for _, n := range nodes {
			for _, c := range calls {
				body := fmt.Sprintf(`{"namespace":"api","identifier":%q,"limit":%d,"duration":60000}`, c.id, c.limit)
				code, err := postLimit(ctx, client, n.api, c.key, body)
				switch {
				case err != nil && ctx.Err() == nil:
					report(err)
				case err == nil && code != c.want:
					report(fmt.Errorf("%s %s: status %d, want %d", n.api, body, code, c.want))
				}
			}
		}
		if rls != nil && round%10 == 0 {
			callRLS(ctx, rls, report)
		}
		select {
		case <-ctx.Done():
		case <-time.After(40 * time.Millisecond): // the load's pace
		}
	}
}

// postLimit sends one /v2/ratelimit.limit call with the bearer key.
func postLimit(ctx context.Context, client *http.Client, api, key, body string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/v2/ratelimit.limit", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_ = res.Body.Close()
	return res.StatusCode, nil
}

// callRLS sends one ShouldRateLimit call of the rules' descriptor.
func callRLS(ctx context.Context, rls rlsv3.RateLimitServiceClient, report func(error)) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}
	_, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil && ctx.Err() == nil {
		report(fmt.Errorf("ShouldRateLimit: %w", err))
	}
}

// startPrometheus runs prom on a free loopback port, scraping the nodes'
// admin listeners every second and evaluating alerts.yaml every second,
// its data in a temporary folder; it stops it at cleanup. It returns the
// base URL of its HTTP API once /-/ready answers.
func startPrometheus(t *testing.T, prom string, nodes []redisNode) string {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, n := range nodes {
		targets = append(targets, strconv.Quote(strings.TrimPrefix(n.admin, "http://")))
	}
	config := fmt.Sprintf(`global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: sluice
    static_configs: [{targets: [%s]}]
`, rules, strings.Join(targets, ", "))
	writeFile(t, filepath.Join(dir, "prometheus.yml"), config)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus logged (last lines):\n%s", lastLines(logs.String(), 30))
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _, err := get(base + "/-/ready"); err == nil && code == http.StatusOK {
			return base
		}
		select {
		case <-done:
			t.Fatalf("prometheus exited before it was ready:\n%s", logs.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready on %s within 30s:\n%s", addr, logs.String())
		}
	}
}

// promResponse is an answer of Prometheus' HTTP API.
type promResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

// promGet calls path of Prometheus' HTTP API at base and returns its data,
// or an error holding Prometheus' own.
func promGet(base, path string) (json.RawMessage, error) {
	code, body, err := get(base + path)
	if err != nil {
		return nil, err
	}
	var r promResponse
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return nil, fmt.Errorf("GET %s: %d %q: %w", path, code, body, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("GET %s: %d %s: %s", path, code, r.ErrorType, r.Error)
	}
	return r.Data, nil
}

// query evaluates expr now through /api/v1/query and returns how many
// series (or scalars) it returned.
func query(base, expr string) (int, error) {
	data, err := promGet(base, "/api/v1/query?query="+url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return 0, err
	}
	if d.ResultType == "scalar" || d.ResultType == "string" {
		return 1, nil
	}
	var series []json.RawMessage
	err = json.Unmarshal(d.Result, &series)
	return len(series), err
}

// waitQuery polls expr until it returns data, for up to timeout.
func waitQuery(t *testing.T, base, expr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n, err := query(base, expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no data within %v", expr, timeout)
		}
		time.Sleep(250 * time.Millisecond) // polling pace
	}
}

// checkDashboardQueries evaluates every query, again each second until
// every query that must return data has, for up to timeout; it fails for
// each query that errors and each one still without data then.
func checkDashboardQueries(t *testing.T, base string, queries []dashboardQuery, timeout time.Duration) {
	t.Helper()
	pending := map[int]bool{}
	for i, q := range queries {
		if q.exempt == "" {
			pending[i] = true
		}
	}
	start := time.Now()
	for {
		for i, q := range queries {
			n, err := query(base, q.expr)
			switch {
			case err != nil:
				t.Fatalf("panel %q: %s: %v", q.panel, q.expr, err)
			case n > 0 && pending[i]:
				delete(pending, i)
			}
		}
		if len(pending) == 0 {
			t.Logf("every query of this mode returned data after %v (%d queries, %d exempt)",
				time.Since(start).Round(time.Millisecond), len(queries), len(queries)-countMust(queries))
			return
		}
		if time.Since(start) > timeout {
			for i := range pending {
				t.Errorf("panel %q: %s: no data within %v", queries[i].panel, queries[i].expr, timeout)
			}
			return
		}
		time.Sleep(time.Second) // a scrape
	}
}

// countMust returns how many queries must return data.
func countMust(queries []dashboardQuery) int {
	n := 0
	for _, q := range queries {
		if q.exempt == "" {
			n++
		}
	}
	return n
}

// checkLoadedRules waits, for up to timeout, until Prometheus has
// evaluated every rule of alerts.yaml, and fails for a rule it did not
// load, that errors, or an alert firing.
func checkLoadedRules(t *testing.T, base string, timeout time.Duration) {
	t.Helper()
	want := 0
	for _, g := range loadAlerts(t).Groups {
		want += len(g.Rules)
	}
	deadline := time.Now().Add(timeout)
	for {
		data, err := promGet(base, "/api/v1/rules?type=alert")
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Groups []struct {
				Rules []struct {
					Name, Health, LastError, State string
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatal(err)
		}
		var evaluated, loaded int
		for _, g := range d.Groups {
			for _, r := range g.Rules {
				loaded++
				switch {
				case r.Health == "err" || r.LastError != "":
					t.Fatalf("alert %s: %s", r.Name, r.LastError)
				case r.State == "firing":
					t.Errorf("alert %s fires on healthy nodes", r.Name)
				case r.Health == "ok":
					evaluated++
				}
			}
		}
		if loaded == want && evaluated == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus loaded %d alert rules and evaluated %d within %v, want %d", loaded, evaluated, timeout, want)
		}
		time.Sleep(250 * time.Millisecond) // polling pace
	}
}
