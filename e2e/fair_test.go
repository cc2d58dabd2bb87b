package e2e

import (
	"strconv"
	"testing"
	"time"
)

// TestEvictionIsFairAcrossWorkspaces fills a server's memory from one
// workspace while another has spent half of a 30-day limit: with
// --max-counters 200, workspace B sends 30 multiLimit calls of 100 new
// identifiers each (15 times the cap). Workspace A, within its share, keeps
// its counter: its next answer still counts what it spent (before fair
// eviction it said remaining 100), and every eviction is B's.
func TestEvictionIsFairAcrossWorkspaces(t *testing.T) {
	const keyA, keyB = "tenant-a-root-key-0001", "tenant-b-root-key-0002"
	n := start(t, nil, "--max-counters", "200", "--root-key", keyA+":acme", "--root-key", keyB+":globex")
	month := (30 * 24 * time.Hour).Milliseconds()
	if d := n.limit(keyA, "api", "user-1", 100, month, 50); !d.Success || d.Remaining != 50 {
		t.Fatalf("A spends 50 of 100: %+v", d)
	}
	for call := range 30 {
		checks := make([]map[string]any, 100)
		for i := range checks {
			checks[i] = map[string]any{"namespace": "api", "identifier": "id-" + strconv.Itoa(call*100+i), "limit": 10, "duration": 60_000}
		}
		if r := n.call(keyB, "multiLimit", checks); r.Code != 200 {
			t.Fatalf("B's multiLimit %d: status %d: %s", call, r.Code, r.Raw)
		}
	}
	time.Sleep(200 * time.Millisecond) // the janitor evicts in the background
	if d := n.limit(keyA, "api", "user-1", 100, month, 0); d.Remaining != 50 {
		t.Fatalf("A's counter after B's flood: remaining %d, want 50 (A lost its counter to B's traffic)", d.Remaining)
	}
	metrics := n.metrics()
	if v := sampleSum(metrics, "sluice_cells_evicted_by_tenant_total", `class="workspace"`); v < 2800 {
		t.Fatalf("cells evicted from workspaces: %v, want at least 2800 (B's flood)", v)
	}
}
