package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestOverrideCapEveryStore runs `sluice serve --max-overrides 2` on each
// store (SQLite, Redis, MySQL): a setOverride that would give a namespace a
// third override gets a 403 naming the bound, while replacing one works.
func TestOverrideCapEveryStore(t *testing.T) {
	stores := []sharedStore{{name: "sqlite", flags: func(string) []string { return nil }, cleanup: func(*testing.T, string) {}}}
	stores = append(stores, sharedStores(t)...)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ws := fmt.Sprintf("e2e-cap-%s-%d", st.name, time.Now().UnixNano())
			t.Cleanup(func() { st.cleanup(t, ws) })
			n := start(t, nil, append(st.flags(st.upstream), "--root-key", rk+":"+ws, "--max-overrides", "2")...)
			for _, tc := range []struct {
				name, identifier string
				code             int
			}{
				{"first", "a", 200},
				{"second", "b*", 200},
				{"third is refused", "c", 403},
				{"replacing works", "a", 200},
			} {
				t.Run(tc.name, func(t *testing.T) {
					r := n.call(rk, "setOverride", map[string]any{"namespace": "api", "identifier": tc.identifier, "limit": 1, "duration": window})
					if r.Code != tc.code {
						t.Fatalf("status %d, want %d: %s", r.Code, tc.code, r.Raw)
					}
					if tc.code == 403 && (!strings.Contains(r.Body.Error.Detail, "2 overrides") || len(r.Body.Error.Errors) == 0 || r.Body.Error.Errors[0].Location != "body.identifier") {
						t.Fatalf("the 403 does not name the bound: %s", r.Raw)
					}
				})
			}
		})
	}
}
