package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
)

// sharedStore is a store that several nodes share, as the e2e tests of
// this file run it.
type sharedStore struct {
	name string
	// kind is the store the start-up log must name.
	kind string
	// upstream is the real server's address (for toxiproxy).
	upstream string
	// flags returns the flags of a node that reaches the server at addr
	// (upstream, or a proxy in front of it).
	flags func(addr string) []string
	// cleanup removes workspace ws's data.
	cleanup func(t *testing.T, ws string)
}

// sharedStores are the shared stores, each with no other service: Redis
// (store and origin) without MySQL, and MySQL without Redis.
func sharedStores(t *testing.T) []sharedStore {
	redisAddr := testenv.RedisAddr(t)
	dsn := testenv.MySQLDSN(t)
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return []sharedStore{
		{
			name: "redis", kind: "redis", upstream: redisAddr,
			flags:   func(addr string) []string { return []string{"--redis-url", "redis://" + addr + "/0"} },
			cleanup: func(t *testing.T, ws string) { deleteRedisWorkspace(t, redisAddr, ws) },
		},
		{
			name: "mysql", kind: "mysql", upstream: cfg.Addr,
			flags: func(addr string) []string {
				c := cfg.Clone()
				c.Addr = addr
				return []string{"--mysql-dsn", c.FormatDSN()}
			},
			cleanup: func(t *testing.T, ws string) { deleteWorkspace(t, dsn, ws) },
		},
	}
}

// deleteRedisWorkspace removes workspace ws's namespaces and overrides
// from the Redis store's default key prefix.
func deleteRedisWorkspace(t *testing.T, addr, ws string) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, fmt.Sprintf("sluice:{*}:%d:%s:*", len(ws), ws), 1000).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleanup of workspace %s: %v", ws, err)
	}
	if err := c.SRem(ctx, "sluice:workspaces", ws).Err(); err != nil {
		t.Errorf("cleanup of workspace %s: %v", ws, err)
	}
}

// waitLimit peeks (cost 0) at id on n until ok accepts the answer, and
// returns it; it fails the test after within.
func waitLimit(t *testing.T, n *node, ns, id string, within time.Duration, ok func(limitData) bool) limitData {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		d := n.limit(rk, ns, id, 100, window, 0)
		if ok(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %s still answers %+v", within, n.URL, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// percentile returns the p-th percentile (0 < p ≤ 1) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[max(i, 0)]
}

// TestSharedStorePropagation runs two nodes on one shared store and nothing
// else (Redis without MySQL, MySQL without Redis), with the periodic
// refresh set to a minute so that only change notification can be
// measured. In 50 trials an override set through one node must apply to the
// other node's decisions (overrideId, and its limit enforced) and a delete
// through the other node must lift it on the first, each within 1 s at the
// 99th percentile; getOverride and listOverrides agree on both nodes.
func TestSharedStorePropagation(t *testing.T) {
	for _, st := range sharedStores(t) {
		t.Run(st.name, func(t *testing.T) {
			ws := fmt.Sprintf("e2e-prop-%s-%d", st.name, time.Now().UnixNano())
			t.Cleanup(func() { st.cleanup(t, ws) })
			flags := append(st.flags(st.upstream), "--root-key", rk+":"+ws, "--override-refresh", "1m")
			nodes := [2]*node{start(t, nil, flags...), start(t, nil, flags...)}
			for _, n := range nodes {
				if logs := n.logs(); !strings.Contains(logs, `"shared":true`) || !strings.Contains(logs, `"store":"`+st.kind+`"`) {
					t.Fatalf("the start-up log does not name a shared %s store:\n%s", st.kind, logs)
				}
			}

			const trials = 50
			var set, lifted []time.Duration
			for i := range trials {
				s, l := propagateOnce(t, nodes[i%2], nodes[1-i%2], i)
				set, lifted = append(set, s), append(lifted, l)
			}
			t.Logf("%s: set visible on the other node: p50 %v, p99 %v, max %v; delete lifted: p50 %v, p99 %v, max %v (%d trials)",
				st.name, percentile(set, 0.5), percentile(set, 0.99), slices.Max(set),
				percentile(lifted, 0.5), percentile(lifted, 0.99), slices.Max(lifted), trials)
			if p := percentile(set, 0.99); p > time.Second {
				t.Errorf("p99 of set-to-applied is %v, want at most 1s", p)
			}
			if p := percentile(lifted, 0.99); p > time.Second {
				t.Errorf("p99 of delete-to-lifted is %v, want at most 1s", p)
			}
			t.Run("reads agree", func(t *testing.T) { checkOverrideReadsAgree(t, nodes) })
		})
	}
}

// propagateOnce sets an override of user-<i> on node w, waits until node r
// applies it and checks that r enforces it, then deletes it on r and waits
// until w lifts it. It returns how long each took to show on the other
// node.
func propagateOnce(t *testing.T, w, r *node, i int) (set, lifted time.Duration) {
	t.Helper()
	id := fmt.Sprintf("user-%d", i)
	begin := time.Now()
	oid := w.setOverride(rk, "prop", id, 1, window)
	waitLimit(t, r, "prop", id, 3*time.Second, func(d limitData) bool { return d.OverrideID == oid })
	set = time.Since(begin)
	if d := r.limit(rk, "prop", id, 100, window, 1); !d.Success || d.Limit != 1 || d.OverrideID != oid {
		t.Fatalf("trial %d: first request under the override: %+v", i, d)
	}
	if d := r.limit(rk, "prop", id, 100, window, 1); d.Success {
		t.Fatalf("trial %d: the override's limit 1 is not enforced: %+v", i, d)
	}
	begin = time.Now()
	var empty struct{}
	r.call(rk, "deleteOverride", map[string]any{"namespace": "prop", "identifier": id}).data(t, &empty)
	waitLimit(t, w, "prop", id, 3*time.Second, func(d limitData) bool { return d.OverrideID == "" && d.Limit == 100 })
	return set, time.Since(begin)
}

// checkOverrideReadsAgree sets four overrides on the first node and checks
// that both nodes list the same four, page by page, and that getOverride
// answers what listOverrides lists.
func checkOverrideReadsAgree(t *testing.T, nodes [2]*node) {
	for _, id := range []string{"a_*", "b", "*c", "d*e"} {
		nodes[0].setOverride(rk, "agree", id, 5, window)
	}
	var views [2]string
	for i, n := range nodes {
		all := listAllOverrides(t, n, "agree", 3)
		for _, o := range all {
			var got overrideData
			n.call(rk, "getOverride", map[string]any{"namespace": "agree", "identifier": o.Identifier}).data(t, &got)
			if got != o {
				t.Fatalf("node %d: getOverride %+v, listOverrides %+v", i, got, o)
			}
		}
		if len(all) != 4 {
			t.Fatalf("node %d lists %d overrides, want 4: %+v", i, len(all), all)
		}
		views[i] = fmt.Sprint(all)
	}
	if views[0] != views[1] {
		t.Fatalf("the nodes disagree:\n%s\n%s", views[0], views[1])
	}
}

// listAllOverrides lists every override of namespace ns on n, perPage a
// page.
func listAllOverrides(t *testing.T, n *node, ns string, perPage int) []overrideData {
	t.Helper()
	var all []overrideData
	cursor := ""
	for {
		body := map[string]any{"namespace": ns, "limit": perPage}
		if cursor != "" {
			body["cursor"] = cursor
		}
		r := n.call(rk, "listOverrides", body)
		var page []overrideData
		r.data(t, &page)
		all = append(all, page...)
		if !r.Body.Pagination.HasMore {
			return all
		}
		cursor = r.Body.Pagination.Cursor
	}
}

// TestSharedStoreDown cuts node a off its shared store (toxiproxy) while
// node b still reaches it. Meanwhile a decides with the overrides it has
// cached, and answers 503 (service_unavailable) to what needs the store:
// setting, deleting and reading overrides, creating a namespace. When the
// store is back, a sees the change b made meanwhile and changes flow
// promptly again, without a restart. The periodic refresh is a minute, so
// recovery comes from re-subscribing (Redis) or the next poll (MySQL).
func TestSharedStoreDown(t *testing.T) {
	for _, st := range sharedStores(t) {
		t.Run(st.name, func(t *testing.T) {
			ws := fmt.Sprintf("e2e-down-%s-%d", st.name, time.Now().UnixNano())
			t.Cleanup(func() { st.cleanup(t, ws) })
			proxy := testenv.NewProxy(t, st.upstream)
			key := []string{"--root-key", rk + ":" + ws, "--override-refresh", "1m"}
			a := start(t, nil, append(st.flags(proxy.Addr()), key...)...)
			b := start(t, nil, append(st.flags(st.upstream), key...)...)
			vip := a.setOverride(rk, "api", "vip", 1, window)
			waitLimit(t, a, "api", "vip", time.Second, func(d limitData) bool { return d.OverrideID == vip })

			proxy.Down()
			t.Run("decisions use the cached override", func(t *testing.T) {
				if d := a.limit(rk, "api", "vip", 100, window, 1); !d.Success || d.Limit != 1 || d.OverrideID != vip {
					t.Fatalf("first request: %+v", d)
				}
				if d := a.limit(rk, "api", "vip", 100, window, 1); d.Success {
					t.Fatalf("second request passed the override's limit 1: %+v", d)
				}
				if d := a.limit(rk, "never-seen", "u", 5, window, 1); !d.Success || d.Limit != 5 {
					t.Fatalf("a namespace the node never saw: %+v", d)
				}
			})
			t.Run("what needs the store answers 503", func(t *testing.T) {
				for _, tc := range []struct {
					name, endpoint string
					body           map[string]any
				}{
					{"setOverride", "setOverride", map[string]any{"namespace": "api", "identifier": "x", "limit": 1, "duration": window}},
					{"setOverride in a new namespace", "setOverride", map[string]any{"namespace": "brand-new", "identifier": "x", "limit": 1, "duration": window}},
					{"deleteOverride", "deleteOverride", map[string]any{"namespace": "api", "identifier": "vip"}},
					{"getOverride", "getOverride", map[string]any{"namespace": "api", "identifier": "vip"}},
					{"listOverrides", "listOverrides", map[string]any{"namespace": "api"}},
				} {
					t.Run(tc.name, func(t *testing.T) {
						r := a.call(rk, tc.endpoint, tc.body)
						e := r.Body.Error
						if r.Code != http.StatusServiceUnavailable || e == nil || e.Status != 503 ||
							!strings.HasSuffix(e.Type, "application/service_unavailable") || !strings.Contains(e.Detail, "unreachable") {
							t.Fatalf("status %d: %s", r.Code, r.Raw)
						}
					})
				}
			})
			b.setOverride(rk, "api", "vip", 7, window) // a misses this change

			proxy.Up()
			waitLimit(t, a, "api", "vip", 10*time.Second, func(d limitData) bool { return d.OverrideID == vip && d.Limit == 7 })
			begin := time.Now()
			later := b.setOverride(rk, "api", "later", 3, window)
			waitLimit(t, a, "api", "later", time.Second, func(d limitData) bool { return d.OverrideID == later })
			t.Logf("%s: after recovery, b's override applied on a in %v", st.name, time.Since(begin))
			if got := a.setOverride(rk, "api", "again", 2, window); got == "" {
				t.Fatal("no override id after recovery")
			}
		})
	}
}

// TestStoreChoice checks which store each combination of flags (and
// SLUICE_STORE) gives, that the start-up log says whether it is shared, and
// that a shared origin beside a per-node store is warned about.
func TestStoreChoice(t *testing.T) {
	redisURL := "redis://" + testenv.RedisAddr(t) + "/0"
	dsn := testenv.MySQLDSN(t)
	const warning = "overrides will differ between nodes"
	for _, tc := range []struct {
		name   string
		env    []string
		flags  []string
		store  string
		shared bool
	}{
		{"nothing: sqlite", nil, nil, "sqlite", false},
		{"redis url: redis", nil, []string{"--redis-url", redisURL}, "redis", true},
		{"mysql dsn: mysql", nil, []string{"--mysql-dsn", dsn}, "mysql", true},
		{"both: mysql", nil, []string{"--redis-url", redisURL, "--mysql-dsn", dsn}, "mysql", true},
		{"explicit sqlite beside redis", nil, []string{"--redis-url", redisURL, "--store", "sqlite"}, "sqlite", false},
		{"SLUICE_STORE", []string{"SLUICE_STORE=sqlite"}, []string{"--redis-url", redisURL}, "sqlite", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := start(t, tc.env, tc.flags...).logs()
			if !strings.Contains(logs, `"store":"`+tc.store+`"`) || !strings.Contains(logs, fmt.Sprintf(`"shared":%v`, tc.shared)) {
				t.Fatalf("start-up log does not say store %s, shared %v:\n%s", tc.store, tc.shared, logs)
			}
			wantWarning := tc.store == "sqlite" && slices.Contains(tc.flags, "--redis-url")
			if strings.Contains(logs, warning) != wantWarning {
				t.Fatalf("warning %q logged: %v, want %v:\n%s", warning, !wantWarning, wantWarning, logs)
			}
		})
	}
	for _, tc := range []struct{ name, flag, want string }{
		{"redis store without url", "redis", "--store redis needs --redis-url"},
		{"mysql store without dsn", "mysql", "--store mysql needs --mysql-dsn"},
		{"unknown store", "etcd", "--store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := run(t, nil, "serve", "--http-addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--store", tc.flag)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output lacks %q:\n%s", code, tc.want, out)
			}
		})
	}
}
