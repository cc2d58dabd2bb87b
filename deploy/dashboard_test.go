package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testenv"
)

// dashboardPath is the Grafana dashboard under test.
const dashboardPath = "grafana/sluice.json"

// dsUID is the datasource of every panel and query: the dashboard's
// datasource variable.
const dsUID = "${datasource}"

// targetLabels are labels that Prometheus adds to every series it scrapes
// (the target's, or Kubernetes' through a ServiceMonitor), or that it
// renames a clashing label to: the dashboard may use them on any metric.
var targetLabels = map[string]bool{"instance": true, "job": true, "namespace": true, "pod": true,
	"service": true, "container": true, "endpoint": true, "exported_namespace": true}

// dashboard is the part of Grafana's dashboard JSON that the test reads.
type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// loadDashboard reads the dashboard and checks that Grafana can import it:
// valid JSON, a schema version, a Prometheus datasource variable, the
// namespace and instance variables, and every panel titled, placed and on
// that datasource, each query with an expression on it. It returns the
// panels that are not rows.
func loadDashboard(t *testing.T) []panel {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardPath, err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("title %q, uid %q, schemaVersion %d: want a title, a uid and schemaVersion >= 36", d.Title, d.UID, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "datasource" && string(v.Query) != `"prometheus"` {
			t.Errorf("variable %s: query %s, want \"prometheus\"", v.Name, v.Query)
		}
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != dsUID) {
			t.Errorf("variable %s: datasource %+v, want uid %s", v.Name, v.Datasource, dsUID)
		}
	}
	for name, typ := range map[string]string{"datasource": "datasource", "namespace": "query", "instance": "query"} {
		if vars[name] != typ {
			t.Errorf("templating: variable %q is %q, want %q", name, vars[name], typ)
		}
	}
	var out []panel
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("panel %q: id %d is zero or repeated", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Title == "" || p.GridPos == nil {
				t.Errorf("panel %d: no title or no gridPos", p.ID)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			checkPanelSource(t, p)
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// checkPanelSource checks that p and each of its queries use the
// datasource variable, and that each query has an expression that filters
// on the namespace and instance variables once per metric it names.
func checkPanelSource(t *testing.T, p panel) {
	t.Helper()
	if p.Datasource == nil || p.Datasource.UID != dsUID || p.Datasource.Type != "prometheus" {
		t.Errorf("panel %q: datasource %+v, want prometheus %s", p.Title, p.Datasource, dsUID)
	}
	if len(p.Targets) == 0 {
		t.Errorf("panel %q: no query", p.Title)
	}
	for _, q := range p.Targets {
		if q.Expr == "" || q.RefID == "" || q.Datasource == nil || q.Datasource.UID != dsUID {
			t.Errorf("panel %q: query %q: want an expr, a refId and datasource %s", p.Title, q.Expr, dsUID)
			continue
		}
		refs, err := parsePromQL(q.Expr)
		if err != nil {
			t.Errorf("panel %q: %q: %v", p.Title, q.Expr, err)
			continue
		}
		for _, v := range []string{`namespace=~"$namespace"`, `instance=~"$instance"`} {
			if strings.Count(q.Expr, v) < len(refs.metrics) {
				t.Errorf("panel %q: %q: each metric should be filtered by %s", p.Title, q.Expr, v)
			}
		}
	}
}

// TestDashboard checks the dashboard's JSON (loadDashboard), then runs
// real servers under traffic, scrapes their admin listeners' /metrics and
// fails, naming the panel, for each metric that a panel's PromQL names and
// no server exports, and for each label it uses that none of the
// expression's metrics carries. The servers: a regional node on Redis
// (through a proxy, cut at the end for the dropped increments) with the
// global layer on MariaDB, Envoy RLS and a small --max-counters (for
// evictions); and a cluster of two nodes (for the peer RPCs).
func TestDashboard(t *testing.T) {
	panels := loadDashboard(t)
	if t.Failed() {
		t.FailNow()
	}
	exp := exposition{}
	merge(exp, regionalMetrics(t))
	merge(exp, clusterMetrics(t))
	for _, p := range panels {
		for _, q := range p.Targets {
			refs, err := parsePromQL(q.Expr)
			if err != nil {
				continue // reported by loadDashboard
			}
			checkRefs(t, p.Title, refs, exp)
		}
	}
}

// checkRefs fails for each metric of refs that exp lacks and for each
// label of refs that none of its metrics carries.
func checkRefs(t *testing.T, title string, refs promqlRefs, exp exposition) {
	t.Helper()
	labels := map[string]bool{}
	for _, l := range refs.created {
		labels[l] = true
	}
	for _, m := range refs.metrics {
		f := exp.family(m)
		if f == nil {
			t.Errorf("panel %q: metric %s is not exported by sluice serve", title, m)
			continue
		}
		for l := range f.labels {
			labels[l] = true
		}
	}
	for _, l := range refs.labels {
		if !labels[l] && !targetLabels[l] {
			t.Errorf("panel %q: label %q is on none of %v", title, l, refs.metrics)
		}
	}
}

// merge adds src's families and labels to dst.
func merge(dst, src exposition) {
	for name, f := range src {
		if dst[name] == nil {
			dst[name] = &family{typ: f.typ, labels: map[string]bool{}}
		}
		for l := range f.labels {
			dst[name].labels[l] = true
		}
	}
}

// rk is the root key of the test's servers.
const rk = "rk-deploy-test-root-key-0001"

// rlsRules is the Envoy RLS configuration of the regional node.
const rlsRules = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n"

// regionalMetrics runs a regional node on Redis with the global layer,
// drives allowed, denied, evicted and RLS traffic and, with Redis cut,
// increments that expire unconfirmed, and returns its metrics.
func regionalMetrics(t *testing.T) exposition {
	t.Helper()
	proxy := testenv.NewProxy(t, testenv.RedisAddr(t))
	dsn := testenv.MySQLDSN(t)
	dir := t.TempDir()
	ws := fmt.Sprintf("deploy-%d", time.Now().UnixNano())
	keys := filepath.Join(dir, "root-keys")
	rules := filepath.Join(dir, "rls.yaml")
	writeFile(t, keys, rk+":"+ws+"\n")
	writeFile(t, rules, rlsRules)
	httpPort, adminPort, rlsPort := freePort(t), freePort(t), freePort(t)
	p := startSluice(t, adminPort, []string{"SLUICE_MYSQL_DSN=" + dsn}, "serve",
		"--http-addr=127.0.0.1:"+strconv.Itoa(httpPort), "--admin-addr=127.0.0.1:"+strconv.Itoa(adminPort),
		"--data-dir="+filepath.Join(dir, "data"), "--region="+ws, "--store=sqlite",
		"--origin=redis", "--redis-url=redis://"+proxy.Addr(), "--root-key-file="+keys,
		"--global-interval=100ms", "--max-counters=64", "--rls-config="+rules, "--rls-addr=127.0.0.1:"+strconv.Itoa(rlsPort))
	p.waitStatus(t, "/readyz", http.StatusOK, 30*time.Second)
	api := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	denied := false
	for i := 0; i < 10 && !denied; i++ { // limit 1: passed, then denied (unless the window turns)
		denied = !limit(t, api, rk, "api", "alice", 1, 60_000)
	}
	if !denied {
		t.Fatal("10 calls under a limit of 1 per minute: none denied")
	}
	for i := range 200 { // past --max-counters: evictions
		limit(t, api, rk, "wide", "id-"+strconv.Itoa(i), 100, 60_000)
	}
	limit(t, api, "not-a-root-key-at-all", "api", "alice", 2, 60_000)
	shouldRateLimit(t, "127.0.0.1:"+strconv.Itoa(rlsPort), "edge", "remote_address", "10.0.0.1")
	p.waitMetric(t, "global rows, replays, evictions", 30*time.Second, nil, hasFamilies(
		"sluice_global_rows_total", "sluice_global_store_calls_total", "sluice_replay_duration_seconds",
		"sluice_cells_evicted_by_tenant_total", "sluice_rls_requests_total", "sluice_origin_read_duration_seconds"))
	proxy.Down() // Redis unreachable: increments of short windows expire unconfirmed
	n := 0
	poke := func() {
		n++
		limit(t, api, rk, "outage", "id-"+strconv.Itoa(n), 100, 1000)
	}
	return p.waitMetric(t, "dropped increments while Redis is cut", 60*time.Second, poke,
		hasFamilies("sluice_replay_dropped_increments_total"))
}

// clusterMetrics runs a cluster of two nodes on loopback, drives traffic
// through one until it has called its peer, and returns that node's
// metrics.
func clusterMetrics(t *testing.T) exposition {
	t.Helper()
	dir := t.TempDir()
	keys := filepath.Join(dir, "root-keys")
	writeFile(t, keys, rk+":deploy-cluster\n")
	gossipA := "127.0.0.1:" + strconv.Itoa(freePort(t))
	var nodes []*proc
	var apis []string
	for i, join := range []string{"", gossipA} {
		httpPort, adminPort := freePort(t), freePort(t)
		gossip := gossipA
		if i > 0 {
			gossip = "127.0.0.1:" + strconv.Itoa(freePort(t))
		}
		args := []string{"serve", "--http-addr=127.0.0.1:" + strconv.Itoa(httpPort), "--admin-addr=127.0.0.1:" + strconv.Itoa(adminPort),
			"--data-dir=" + filepath.Join(dir, strconv.Itoa(i)), "--root-key-file=" + keys,
			"--origin=cluster", "--cluster-addr=" + gossip}
		if join != "" {
			args = append(args, "--cluster-join="+join)
		}
		nodes = append(nodes, startSluice(t, adminPort, nil, args...))
		apis = append(apis, "http://127.0.0.1:"+strconv.Itoa(httpPort))
	}
	for _, n := range nodes {
		n.waitStatus(t, "/readyz", http.StatusOK, 30*time.Second)
		n.waitMetric(t, "2 cluster members", 30*time.Second, nil, func(body string, _ exposition) bool {
			return strings.Contains(body, "\nsluice_cluster_members 2\n")
		})
	}
	i := 0
	poke := func() { // identities owned by the peer are decided through it
		i++
		limit(t, apis[0], rk, "spread", "id-"+strconv.Itoa(i), 10, 60_000)
	}
	return nodes[0].waitMetric(t, "peer RPCs", 30*time.Second, poke,
		hasFamilies("sluice_cluster_rpcs_total", "sluice_cluster_rpc_duration_seconds"))
}

// hasFamilies returns a condition: every one of names has a sample.
func hasFamilies(names ...string) func(string, exposition) bool {
	return func(_ string, exp exposition) bool {
		for _, n := range names {
			if f := exp[n]; f == nil || len(f.labels) == 0 {
				return false
			}
		}
		return true
	}
}

// limit sends one /v2/ratelimit.limit call and returns its success; a
// refused root key returns false.
func limit(t *testing.T, api, key, ns, id string, lim, durationMS int) bool {
	t.Helper()
	body := fmt.Sprintf(`{"namespace":%q,"identifier":%q,"limit":%d,"duration":%d}`, ns, id, lim, durationMS)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/v2/ratelimit.limit", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("ratelimit.limit: %v", err)
	}
	defer res.Body.Close()
	var out struct {
		Data struct {
			Success bool `json:"success"`
		} `json:"data"`
	}
	if res.StatusCode == http.StatusUnauthorized {
		return false
	}
	if res.StatusCode != http.StatusOK || json.NewDecoder(res.Body).Decode(&out) != nil {
		t.Fatalf("ratelimit.limit: status %d", res.StatusCode)
	}
	return out.Data.Success
}

// shouldRateLimit sends one Envoy RLS call to addr (h2c), as Envoy does.
func shouldRateLimit(t *testing.T, addr, domain, key, value string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}); err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestDashboardPromQLSyntax parses every query of the dashboard with
// Prometheus' own parser: each becomes a recording rule (Grafana's
// variables replaced by values) that `promtool check rules` must accept.
// It skips when promtool (Debian's package prometheus) is not installed,
// or fails when CI is set.
func TestDashboardPromQLSyntax(t *testing.T) {
	promtool := toolPath(t, "promtool", prometheusInstall)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	vars := strings.NewReplacer("$__rate_interval", "5m", "$namespace", ".*", "$instance", ".*")
	for _, p := range loadDashboard(t) {
		for i, q := range p.Targets {
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:panel_%d_%d", p.ID, i), Expr: vars.Replace(q.Expr)})
		}
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	raw, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, file, string(raw))
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}
