package rls

import (
	"strconv"
	"strings"
	"testing"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/analytics"
)

// TestRecorder checks that every enforced decision is recorded under the
// domain's workspace and the descriptor's counter, and shadow checks and
// reports are not.
func TestRecorder(t *testing.T) {
	l, err := sluice.New(sluice.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	rec, err := analytics.New(analytics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(Config{Limiter: l, Domains: mustParse(t, testRules), Clock: clock, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 { // user: 3 an hour; watch: shadow; tokens: reports
		if _, err := svc.ShouldRateLimit(t.Context(), req("d", 0, desc("user=alice"), desc("watch=x"), withHits(desc("tokens=x"), 10))); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := rec.Report(WorkspaceOf("d"), "d", analytics.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	last := rep.Series[len(rep.Series)-1]
	if last.Passed != 3 || last.Denied != 2 || len(rep.TopRequests) != 1 || len(rep.TopDenied) != 1 || rep.TopDenied[0].Count != 2 {
		t.Fatalf("recorded %+v, top requests %+v, top denied %+v", last, rep.TopRequests, rep.TopDenied)
	}
	t.Logf("identifier recorded: %q", rep.TopDenied[0].Identifier)
}

// TestRecordedIdentifiersCapped checks what the analytics keep of a
// descriptor's counter identifier: a short one whole, and the longest a
// call may send (8 entries of 512-byte keys and values: 8,256 bytes) in at
// most analytics.MaxIdentifierBytes.
func TestRecordedIdentifiersCapped(t *testing.T) {
	var long []string
	for i := range MaxEntries {
		long = append(long, strings.Repeat(strconv.Itoa(i), MaxEntryBytes)+"="+strings.Repeat("v", MaxEntryBytes))
	}
	for _, tc := range []struct {
		name, entries string
		wantBytes     int // of the identifier kept
	}{
		{"short", "user=alice", len("4:user5:alice")},
		{"8 entries of 512-byte keys and values", strings.Join(long, ","), analytics.MaxIdentifierBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := sluice.New(sluice.Config{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			rec, err := analytics.New(analytics.Config{})
			if err != nil {
				t.Fatal(err)
			}
			svc, err := New(Config{Limiter: l, Domains: mustParse(t, testRules), Clock: clock, Recorder: rec})
			if err != nil {
				t.Fatal(err)
			}
			d := withLimit(desc(tc.entries), 10, typev3.RateLimitUnit_HOUR, 1)
			if _, err := svc.ShouldRateLimit(t.Context(), req("d", 0, d)); err != nil {
				t.Fatal(err)
			}
			rep, err := rec.Report(WorkspaceOf("d"), "d", analytics.Minute, t0)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.TopRequests) != 1 {
				t.Fatalf("%d identifiers listed, want 1", len(rep.TopRequests))
			}
			if got := len(rep.TopRequests[0].Identifier); got != tc.wantBytes {
				t.Fatalf("an identifier of %d bytes kept, want %d", got, tc.wantBytes)
			}
		})
	}
}
