package analytics

import (
	"testing"
	"time"
)

// TestRegionMerge splits 20 minutes of Zipf traffic between two nodes and
// answers for the region on one of them with the other's part: the series
// count every decision once, and the merged top lists are the true top 10
// of the whole traffic, within the bound of the whole traffic.
func TestRegionMerge(t *testing.T) {
	a, b := newRecorder(t, Config{}), newRecorder(t, Config{})
	const n = 120_000
	requests, denials := limitedZipf(n, func(i int, id string, passed bool, now time.Time) {
		node := a
		if i%3 == 0 {
			node = b
		}
		node.Record("ws", "api", id, passed, now)
		if i%1000 == 0 {
			a.Advance(now)
			b.Advance(now)
		}
	})
	end := t0.Add(20*time.Minute - time.Second)
	parts := b.Changes(t0, end)
	if len(parts) != 1 {
		t.Fatalf("changes of %d namespaces, want 1", len(parts))
	}
	for _, iv := range []Interval{Hour, Day} {
		rep, err := a.ReportWith("ws", "api", iv, end, []Part{parts[Key{"ws", "api"}]})
		if err != nil {
			t.Fatal(err)
		}
		var passed, denied uint64
		for _, p := range rep.Series {
			passed, denied = passed+p.Passed, denied+p.Denied
		}
		var wantDenied uint64
		for _, d := range denials {
			wantDenied += d
		}
		if passed+denied != n || denied != wantDenied {
			t.Fatalf("%s: %d passed and %d denied, want %d decisions, %d denied", iv, passed, denied, n, wantDenied)
		}
		checkTop(t, string(iv)+" requests", rep.TopRequests, requests, rep.Requests)
		checkTop(t, string(iv)+" denied", rep.TopDenied, denials, rep.Denials)
	}
	// Alone, a node answers for its own decisions only.
	alone := mustReport(t, a, "ws", "api", Hour, end)
	if alone.Requests == 0 || alone.Requests >= n {
		t.Fatalf("node a alone counts %d of %d", alone.Requests, n)
	}
}

// TestChangesSince checks what a node exports: only namespaces with
// decisions since the last export, only the periods since then.
func TestChangesSince(t *testing.T) {
	r := newRecorder(t, Config{})
	r.Record("ws", "old", "x", true, t0)
	r.Record("ws", "new", "x", false, t0.Add(10*time.Second))
	ch := r.Changes(t0.Add(5*time.Second), t0.Add(10*time.Second))
	p, ok := ch[Key{"ws", "new"}]
	if len(ch) != 1 || !ok {
		t.Fatalf("changes %v, want the namespace new only", ch)
	}
	if len(p.Seconds) != 1 || p.Seconds[t0.Unix()+10] != (Counts{Denied: 1}) || p.Minutes[t0.Unix()/60] != (Counts{Denied: 1}) {
		t.Fatalf("periods %v %v", p.Seconds, p.Minutes)
	}
	if len(p.Top) != 4 { // one bucket of each window, of requests and of denials
		t.Fatalf("top buckets %v, want 4", p.Top)
	}
	if s := p.Top[TopKey{Window: Minute, Period: (t0.Unix() + 10) / minuteWidth, Denied: true}]; s.Total != 1 || s.Entries[0].Identifier != "x" {
		t.Fatalf("the denials' bucket %+v", s)
	}
}
