package server

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func limitBody(namespace string) string {
	return `{"namespace":"` + namespace + `","identifier":"i","limit":10,"duration":60000}`
}

// TestNamespaceCap checks --max-namespaces: a call that would create a
// namespace beyond the cap of its workspace gets a 403 with Unkey's error
// body, while existing namespaces and other workspaces keep working.
func TestNamespaceCap(t *testing.T) {
	const keyA, keyB = "key-of-workspace-a", "key-of-workspace-b"
	s := newServerWith(t, Config{
		MaxNamespaces: 2,
		RootKeys:      []RootKey{{Key: keyA, Workspace: "a"}, {Key: keyB, Workspace: "b"}},
	})
	h := s.Handler()
	for _, tc := range []struct {
		name, key, path, body string
		code                  int
	}{
		{"first namespace", keyA, "/v2/ratelimit.limit", limitBody("one"), 200},
		{"second namespace", keyA, "/v2/ratelimit.limit", limitBody("two"), 200},
		{"third namespace is refused", keyA, "/v2/ratelimit.limit", limitBody("three"), 403},
		{"an existing namespace still works", keyA, "/v2/ratelimit.limit", limitBody("one"), 200},
		{"multiLimit is refused too", keyA, "/v2/ratelimit.multiLimit", "[" + limitBody("one") + "," + limitBody("four") + "]", 403},
		{"setOverride is refused too", keyA, "/v2/ratelimit.setOverride", `{"namespace":"five","identifier":"i","limit":1,"duration":1000}`, 403},
		{"setOverride in an existing namespace works", keyA, "/v2/ratelimit.setOverride", `{"namespace":"two","identifier":"i","limit":1,"duration":1000}`, 200},
		{"another workspace has its own cap", keyB, "/v2/ratelimit.limit", limitBody("three"), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, h, "POST", tc.path, "Bearer "+tc.key, "application/json", tc.body)
			if r.code != tc.code {
				t.Fatalf("status %d, want %d: %s", r.code, tc.code, r.raw)
			}
			if tc.code != 403 {
				return
			}
			e, _ := r.body["error"].(map[string]any)
			if e["type"] != TypeStoreLimit || e["status"] != 403.0 || len(r.errorLocations()) == 0 || r.requestID() == "" {
				t.Fatalf("not Unkey's error body for the cap: %s", r.raw)
			}
		})
	}
}

// TestSlowStoreDoesNotHoldLimitCalls blocks the store's namespace creation:
// limit calls on a new namespace are still decided (without overrides), the
// namespace is created once, in the background, and a pending creation
// counts toward the cap.
func TestSlowStoreDoesNotHoldLimitCalls(t *testing.T) {
	st := newMemStore()
	st.release = make(chan struct{})
	s := newServerOver(t, st, Config{MaxNamespaces: 1})
	h := s.Handler()
	decided := make(chan reply, 1)
	go func() {
		for range 3 {
			r := do(t, h, "POST", "/v2/ratelimit.limit", "Bearer k", "application/json", limitBody("new"))
			if r.code != 200 {
				decided <- r
				return
			}
		}
		decided <- do(t, h, "POST", "/v2/ratelimit.limit", "Bearer k", "application/json", limitBody("other"))
	}()
	select {
	case r := <-decided:
		if r.code != 403 {
			t.Fatalf("a second namespace while the first is being created: status %d, want 403: %s", r.code, r.raw)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("limit calls waited for the blocked store")
	}
	s.namespaces.mu.Lock()
	n := len(s.namespaces.pending)
	s.namespaces.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d creations pending, want 1 for the three calls", n)
	}
	close(st.release)
	s.namespaces.wait()
	ns, ok := s.cfg.Catalog.CachedNamespace(OpenWorkspace, "new")
	if !ok || ns.Name != "new" {
		t.Fatalf("namespace not created once the store answered: %+v, %v", ns, ok)
	}
}

// TestMultiLimitWaitsForNamespacesOnce sends a multiLimit of 100 checks on
// one new namespace while the store hangs: the checks share the call's one
// namespace wait (virtual time), where each used to wait on its own
// (100 × 50 ms).
func TestMultiLimitWaitsForNamespacesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore()
		st.release = make(chan struct{})
		s := newServerOver(t, st, Config{})
		checks := make([]string, 100)
		for i := range checks {
			checks[i] = limitBody("new")
		}
		start := time.Now()
		r := do(t, s.Handler(), "POST", "/v2/ratelimit.multiLimit", "Bearer k", "application/json", "["+strings.Join(checks, ",")+"]")
		if r.code != 200 {
			t.Fatalf("multiLimit: %d %s", r.code, r.raw)
		}
		if waited := time.Since(start); waited > namespaceWait {
			t.Errorf("multiLimit of 100 checks waited %v for its namespace, want at most %v", waited, namespaceWait)
		}
		close(st.release)
		s.namespaces.wait()
	})
}
