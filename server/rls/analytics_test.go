package rls

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/analytics"
)

// TestRecorder checks that every enforced decision is recorded under the
// domain's workspace and the descriptor's counter, and shadow checks are
// not.
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
	for range 5 { // user: 3 an hour; watch: shadow
		if _, err := svc.ShouldRateLimit(t.Context(), req("d", 0, desc("user=alice"), desc("watch=x"))); err != nil {
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
