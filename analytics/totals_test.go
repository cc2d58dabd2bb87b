package analytics

import (
	"testing"
	"time"
)

// TestTotals checks the last hour's totals: the minute of now and the 59
// before it, whatever the second of now; a namespace without decisions
// (or beyond the cap) counts zero; the keys' order is kept.
func TestTotals(t *testing.T) {
	r := newRecorder(t, Config{MaxNamespaces: 2})
	api, web, none := Key{"ws", "api"}, Key{"ws", "web"}, Key{"ws", "none"}
	at := func(k Key, d time.Duration, passed bool) { r.Record(k.Workspace, k.Namespace, "u", passed, t0.Add(d)) }
	at(api, -59*time.Minute-time.Second, true) // the minute before the span of t0+59s
	at(api, -59*time.Minute, true)             // the span's first minute
	at(api, 0, false)
	at(api, 59*time.Second, true)
	at(web, 30*time.Second, false)
	at(Key{"ws", "beyond"}, 0, true) // counted in the aggregate, not listed
	for _, tc := range []struct {
		name string
		now  time.Duration
		keys []Key
		want []Counts
	}{
		{"the hour", 59 * time.Second, []Key{api, web, none}, []Counts{{Passed: 2, Denied: 1}, {Denied: 1}, {}}},
		{"order kept", 59 * time.Second, []Key{none, web, api}, []Counts{{}, {Denied: 1}, {Passed: 2, Denied: 1}}},
		{"a minute later", 60 * time.Second, []Key{api}, []Counts{{Passed: 1, Denied: 1}}},
		{"59 minutes later", 59 * time.Minute, []Key{api, web}, []Counts{{Passed: 1, Denied: 1}, {Denied: 1}}},
		{"an hour later", time.Hour, []Key{api, web}, []Counts{{}, {}}},
		{"two hours later", 2 * time.Hour, []Key{api}, []Counts{{}}},
		{"beyond the cap", 0, []Key{{"ws", "beyond"}}, []Counts{{}}},
		{"no keys", 0, nil, []Counts{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := r.Totals(tc.keys, t0.Add(tc.now))
			if len(got) != len(tc.want) {
				t.Fatalf("%d totals, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("totals %+v, want %+v", got, tc.want)
				}
			}
		})
	}
	if first, last := TotalsSpan(t0.Add(59 * time.Second)); last-first+1 != TotalsMinutes || first != t0.Unix()/60-59 {
		t.Fatalf("span %d..%d", first, last)
	}
}
