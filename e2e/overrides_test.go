package e2e

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// TestAdversarialOverridesOverHTTP writes, through the API of a real
// `sluice serve`, 10,000 wildcard overrides into one namespace, each with
// as many runs as a pattern may hold and every piece occurring in the
// identifier, out of order (the costliest shape known: each is a
// candidate whose runs are placed), and then sends limit calls with that
// 512-byte identifier and the same calls in a namespace without overrides,
// in alternating blocks. The overrides may add at most 1 ms of the
// server's CPU time per call (/proc/PID/stat) and 1 ms to the median
// latency on a machine where a call without overrides costs the server at
// most 100 µs of CPU; on a slower one both bounds grow by as much as that
// call's CPU time does (1 ms per 100 µs it costs), since the same lookup
// takes that much longer there (the development VM, whose quiet call
// costs 60–100 µs, measured 0.26 ms added; on a day it cost 210 µs, the
// same code added 1.4–1.6 ms). Another process can only make a
// measurement worse, so one within the bound settles it; a test that
// fails has measured more than the bound three times in a row. Server
// TestAdversarialOverridesCost asserts 1 ms at p99 in process, where the
// race detector and other tests do not blur the tail.
func TestAdversarialOverridesOverHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 10,000 overrides")
	}
	n := start(t, nil, "--root-key", rk+":e2e-hostile-overrides")
	writeOverridesOverHTTP(t, n, "hostile", 10_000, func(i int) string {
		return "*" + strings.Repeat("a*", 5) + strings.Repeat("a", 1+i/100) + "c*b" + strings.Repeat("a", 1+i%100) + "*"
	})
	id := "b" + strings.Repeat("a", 510) + "c"
	var cpu, p50, bound time.Duration
	for attempt := 1; attempt <= 3; attempt++ {
		var quiet time.Duration
		cpu, p50, quiet = overrideCost(t, n, id)
		bound = time.Millisecond * max(quiet, 100*time.Microsecond) / (100 * time.Microsecond)
		if cpu <= bound && p50 <= bound {
			return
		}
		t.Logf("attempt %d: more than the bound (%v, a call without overrides costing %v of CPU)", attempt, bound, quiet)
	}
	t.Fatalf("10,000 adversarial overrides add %v of CPU and %v of median latency per call, three measurements in a row (bound %v each)", cpu, p50, bound)
}

// overrideCost sends limit calls for id to n's namespaces "quiet" (no
// overrides) and "hostile", 250 each in turn, four times, and returns
// what a hostile call adds to a quiet one (n's CPU time and the median
// latency) and n's CPU time per quiet call.
func overrideCost(t *testing.T, n *node, id string) (cpu, p50, quiet time.Duration) {
	t.Helper()
	lat := map[string][]time.Duration{}
	spent := map[string]time.Duration{}
	for range 4 {
		for _, ns := range []string{"quiet", "hostile"} {
			before := processCPU(t, n.cmd.Process.Pid)
			for range 250 {
				began := time.Now()
				d := n.limit(rk, ns, id, 1_000_000_000, window, 1)
				lat[ns] = append(lat[ns], time.Since(began))
				if !d.Success || d.OverrideID != "" {
					t.Fatalf("namespace %s: %+v: an override matched, or the call was denied", ns, d)
				}
			}
			spent[ns] += processCPU(t, n.cmd.Process.Pid) - before
		}
	}
	median := func(s []time.Duration) time.Duration { slices.Sort(s); return s[len(s)/2] }
	calls := time.Duration(len(lat["quiet"]))
	t.Logf("server CPU per call %v with 10,000 overrides, %v without; p50 %v, %v", spent["hostile"]/calls, spent["quiet"]/calls, median(lat["hostile"]), median(lat["quiet"]))
	return (spent["hostile"] - spent["quiet"]) / calls, median(lat["hostile"]) - median(lat["quiet"]), spent["quiet"] / calls
}

// writeOverridesOverHTTP sets count overrides pattern(0), pattern(1), …
// in namespace ns through n's API, four calls at a time.
func writeOverridesOverHTTP(t *testing.T, n *node, ns string, count int, pattern func(int) string) {
	t.Helper()
	const workers = 4
	began := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < count; i += workers {
				r := n.call(rk, "setOverride", map[string]any{"namespace": ns, "identifier": pattern(i), "limit": 1_000_000, "duration": window})
				if r.Code != 200 {
					t.Errorf("setOverride %d: status %d: %s", i, r.Code, r.Raw)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d overrides written in %v", count, time.Since(began).Round(time.Millisecond))
	if t.Failed() {
		t.FailNow()
	}
}

// processCPU returns the CPU time (user and system) process pid has used,
// from /proc/PID/stat, in clock ticks of 10 ms.
func processCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name (field 2) may hold spaces: count fields after it.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
