package sim

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestBuiltinScenarios runs every built-in scenario once, under the race
// detector in the suite: the run must stay in its scenario's band and admit
// something. A regression that takes a scenario out of its band fails here.
// That a seed repeats a run byte for byte, and that another seed changes the
// figures and stays in band, is checked out of process, for every scenario,
// by e2e's TestSimAll (and in process by TestWriteFilesIsByteIdentical).
func TestBuiltinScenarios(t *testing.T) {
	for _, s := range Builtin() {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			r, err := Run(s, DefaultSeed)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("seed %d: %d requests, admitted %d, reference %d, over %v%%, under %v%%, worst span %v (model %v), origin calls/request %v, global rows/request %v",
				r.Seed, r.Requests, r.Admitted, r.Reference, r.OverPct, r.UnderPct, r.WorstSpan, r.ReferenceWorstSpan, r.Origin.PerRequest, r.Global.RowsPerRequest)
			if !r.InBand || r.Band == nil || *r.Band != s.Band || !s.Band.Contains(r.OverPct) {
				t.Errorf("seed %d: over-admission %v%% is outside the band %v", r.Seed, r.OverPct, s.Band)
			}
			if r.Reference == 0 || r.Admitted == 0 {
				t.Errorf("seed %d: nothing admitted (engine %d, model %d)", r.Seed, r.Admitted, r.Reference)
			}
		})
	}
}

// TestRunCountsWhatItSends checks the bookkeeping of a Result against
// itself: the series add up to the admissions, identities to the totals,
// and the model never admits more than the limit in a fixed window.
func TestRunCountsWhatItSends(t *testing.T) {
	s, _ := Find("region-2x")
	r, err := Run(s, 7)
	if err != nil {
		t.Fatal(err)
	}
	var series, ref, ids int64
	for _, sr := range r.Series {
		if len(sr.Admitted) != s.Windows {
			t.Fatalf("series %s has %d windows, want %d", sr.Name, len(sr.Admitted), s.Windows)
		}
		for _, n := range sr.Admitted {
			series += n
		}
	}
	for _, n := range r.ReferenceSeries {
		ref += n
		if n > s.Limit*int64(s.Identifiers) {
			t.Errorf("the model admitted %d in one window, above %d identifiers × %d", n, s.Identifiers, s.Limit)
		}
	}
	for _, id := range r.Identities {
		ids += id.Admitted
	}
	if series != r.Admitted || ids != r.Admitted || ref != r.Reference {
		t.Errorf("series %d, identities %d, admitted %d; reference series %d, reference %d", series, ids, r.Admitted, ref, r.Reference)
	}
	// About Load × Limit × Windows × Identifiers requests (Poisson).
	want := s.Load * float64(s.Limit*int64(s.Windows*s.Identifiers))
	if got := float64(r.Requests); got < 0.9*want || got > 1.1*want {
		t.Errorf("%d requests, want about %.0f", r.Requests, want)
	}
}

func TestModel(t *testing.T) {
	m := newModel(10, 0, 2, 2) // 10 ms windows, two identities, two windows
	// Window 0: 4 of a limit of 4 pass at t=1..4, the 5th is denied.
	for i, want := range []bool{true, true, true, true, false} {
		if got := m.admit(0, int64(1+i), 4, 1); got != want {
			t.Fatalf("request %d at t=%d: %v, want %v", i, 1+i, got, want)
		}
	}
	// t=15: elapsed 5 of 10, the previous cell weighs floor(4*5/10) = 2.
	for i, want := range []bool{true, true, false} {
		if got := m.admit(0, 15, 4, 1); got != want {
			t.Fatalf("request %d at t=15: %v, want %v", i, got, want)
		}
	}
	// Another identifier has its own counter.
	if !m.admit(1, 15, 1, 1) || m.admit(1, 15, 1, 1) {
		t.Error("identifier 1 with a limit of 1: want one pass, then a denial")
	}
}

func TestBusiest(t *testing.T) {
	ones := func(ms ...int64) []admission {
		var out []admission
		for _, m := range ms {
			out = append(out, admission{m, 1})
		}
		return out
	}
	tests := []struct {
		got  []admission
		d    int64
		want int64
	}{
		{nil, 10, 0},
		{ones(5), 10, 1},
		{ones(0, 9, 10, 19), 10, 2}, // [0,10) holds 0 and 9; [9,19) holds 9 and 10
		{ones(0, 1, 2, 3, 20), 10, 4},
		{ones(0, 5, 9, 14, 15), 10, 3},
		{[]admission{{0, 5}, {9, 1}, {10, 7}, {25, 2}}, 10, 8}, // costs: 1+7 in [9,19)
	}
	for _, tc := range tests {
		if got := busiest(tc.got, tc.d); got != tc.want {
			t.Errorf("busiest(%v, %d) = %d, want %d", tc.got, tc.d, got, tc.want)
		}
	}
}

// TestTallyBusiest: a run of one window keeps no admissions and takes its
// total as the busiest span, which is what the admissions give; a run of
// several windows finds the busiest span across them.
func TestTallyBusiest(t *testing.T) {
	const start, d = 60_000, 1000
	tests := []struct {
		name        string
		windows     int
		ms          []int64 // admitted by both, cost 1 each
		want        int64
		keepsAdmits bool
	}{
		{"one window, none", 1, nil, 0, false},
		{"one window, its first and last instants", 1, []int64{start, start + 500, start + d - 1}, 3, false},
		{"two windows, a span across them", 2, []int64{start, start + 900, start + 1100, start + 1500}, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Scenario{Regions: 1, Nodes: 1, Limit: 100, Window: d * time.Millisecond, Windows: tt.windows}
			ta := newTally(s, start, 1)
			for _, ms := range tt.ms {
				ta.record(event{ms: ms, cost: 1}, true, 0, 0)
			}
			if keeps := ta.got != nil; keeps != tt.keepsAdmits {
				t.Fatalf("keeps admissions: %v, want %v", keeps, tt.keepsAdmits)
			}
			for _, ref := range []bool{false, true} {
				if got := ta.busiest(0, ref); got != tt.want {
					t.Errorf("busiest (model: %v) = %d, want %d", ref, got, tt.want)
				}
			}
		})
	}
}

func TestDenialSpread(t *testing.T) {
	c := newDenialClock(3, 2, 2) // two identities, two windows
	c.denied(0, 0, 1, 100)       // identity 0, window 0: region 1 first
	c.denied(0, 0, 1, 150)       // a later denial in the same region changes nothing
	c.denied(0, 0, 0, 130)
	c.denied(0, 0, 2, 400)
	c.denied(1, 0, 2, 50) // identity 1: region 2 alone, no lag
	c.denied(0, 1, 0, 1000)
	c.denied(0, 1, 2, 1000) // at the same instant: a lag of 0
	want := &DenialSpread{Samples: 3, MedianMs: 30, MaxMs: 300}
	if got := c.spread(); !reflect.DeepEqual(got, want) {
		t.Errorf("spread() = %+v, want %+v", got, want)
	}
	if got := newDenialClock(3, 1, 1).spread(); got.Samples != 0 {
		t.Errorf("no denials: %+v", got)
	}
}

func TestValidate(t *testing.T) {
	valid, _ := Find("region-2x")
	multi, _ := Find("global-outage")
	tests := []struct {
		field string
		edit  func(*Scenario)
	}{
		{"name", func(s *Scenario) { s.Name = "Has Spaces" }},
		{"regions", func(s *Scenario) { s.Regions = 0 }},
		{"nodes", func(s *Scenario) { s.Nodes = -1 }},
		{"limit", func(s *Scenario) { s.Limit = 0 }},
		{"window", func(s *Scenario) { s.Window = 1500 * time.Microsecond }},
		{"windows", func(s *Scenario) { s.Windows = 0 }},
		{"load", func(s *Scenario) { s.Load = 0 }},
		{"load", func(s *Scenario) { s.Load = 1e9 }},
		{"identifiers", func(s *Scenario) { s.Identifiers = 0 }},
		{"skew", func(s *Scenario) { s.Skew = 1 }},
		{"traffic", func(s *Scenario) { s.Traffic = "random" }},
		{"replay_interval", func(s *Scenario) { s.ReplayInterval = -time.Second }},
		{"origin_margin", func(s *Scenario) { s.OriginMargin = 2 }},
		{"origin_loss", func(s *Scenario) { s.OriginLoss = 1 }},
		{"replay_latency", func(s *Scenario) { s.ReplayLatency = -time.Millisecond }},
		{"global_loss", func(s *Scenario) { s.GlobalLoss = 0.1 }}, // one region: no global store
		{"band", func(s *Scenario) { s.Band = Band{MinOverPct: 5, MaxOverPct: 1} }},
		{"faults[0].kind", func(s *Scenario) { s.Faults = []Fault{{Kind: "flood"}} }},
		{"faults[0].kind", func(s *Scenario) { s.Faults = []Fault{{Kind: GlobalOutage, Until: time.Second}} }},
		{"faults[0].until", func(s *Scenario) { s.Faults = []Fault{{Kind: OriginOutage, At: time.Second, Until: time.Second}} }},
		{"faults[0].at", func(s *Scenario) { s.Faults = []Fault{{Kind: Restart, At: time.Hour}} }},
		{"faults[0].node", func(s *Scenario) { s.Faults = []Fault{{Kind: Restart, Node: 3}} }},
		{"faults[1].regions[0]", func(s *Scenario) {
			s.Faults = []Fault{{Kind: Restart}, {Kind: OriginOutage, Until: time.Second, Regions: []int{1}}}
		}},
		{"origin", func(s *Scenario) { s.Origin = "redis" }},
		{"global_latency", func(s *Scenario) { s.GlobalLatency = time.Second }}, // one region: no global store
		{"failure_detection", func(s *Scenario) { s.FailureDetection = -time.Second }},
		{"replay_jitter", func(s *Scenario) { s.ReplayJitter = 10 * time.Millisecond }}, // no latency
		{"replay_jitter", func(s *Scenario) { s.ReplayLatency, s.ReplayJitter = time.Second, -time.Millisecond }},
		{"faults[0].until", func(s *Scenario) { s.Faults = []Fault{{Kind: NodeLoss, At: 2 * time.Second, Until: time.Second}} }},
		{"faults[0].node", func(s *Scenario) { s.Faults = []Fault{{Kind: NodeLoss, Node: 3}} }},
		{"faults[0].node", func(s *Scenario) { // the region would have no node left
			s.Faults = []Fault{{Kind: NodeLoss, Node: 0}, {Kind: NodeLoss, Node: 1, At: time.Second}, {Kind: NodeLoss, Node: 2, At: 2 * time.Second}}
		}},
		{"faults[0].at", func(s *Scenario) { // node 0 is lost already
			s.Faults = []Fault{{Kind: NodeLoss, Node: 0, Until: 5 * time.Second}, {Kind: NodeLoss, Node: 0, At: time.Second}}
		}},
		{"faults[0].kind", func(s *Scenario) { s.Origin, s.Faults = OriginCluster, []Fault{{Kind: Restart}} }},
	}
	if err := valid.Validate(); err != nil {
		t.Fatalf("built-in scenario: %v", err)
	}
	if err := multi.Validate(); err != nil {
		t.Fatalf("built-in scenario: %v", err)
	}
	for _, tc := range tests {
		s := valid
		tc.edit(&s)
		err := s.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, ErrInvalidScenario) {
			t.Errorf("want an invalid-scenario error on field %s, got %v", tc.field, err)
			continue
		}
		if _, err := Run(s, 1); !errors.Is(err, ErrInvalidScenario) {
			t.Errorf("Run of an invalid scenario (%s): %v", tc.field, err)
		}
	}
}

func TestFmtPct(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 1.5: "1.5", 0.1234: "0.123", -0.0001: "0", 40: "40", 2.0005: "2.001"} {
		if got := fmtPct(in); got != want {
			t.Errorf("fmtPct(%v) = %q, want %q", in, got, want)
		}
	}
}

// TestClusterOneNodeIsExact checks that one node in cluster mode, which owns
// every identity, makes exactly the model's decisions.
func TestClusterOneNodeIsExact(t *testing.T) {
	s, _ := Find("one-node")
	s.Origin = OriginCluster
	res, err := Run(s, 3)
	if err != nil {
		t.Fatal(err)
	}
	if res.Admitted != res.Reference || res.OverPct != 0 || res.UnderPct != 0 {
		t.Errorf("admitted %d, model %d (over %v%%, under %v%%); want the model's decisions", res.Admitted, res.Reference, res.OverPct, res.UnderPct)
	}
	if res.Origin.RPCs != 0 {
		t.Errorf("%d peer RPCs on a one-node ring, want 0", res.Origin.RPCs)
	}
}

// TestNodeLossTimeline checks what a lost node does in each mode: it
// admits nothing from the window after it dies until a fresh node joins in
// its place, and serves again from then; in cluster mode the others reach
// the identities it owned over peer RPCs.
func TestNodeLossTimeline(t *testing.T) {
	t.Parallel() // one core of simulation: the package's long runs share both
	for _, mode := range []OriginKind{OriginShared, OriginCluster} {
		t.Run(string(mode), func(t *testing.T) {
			s, _ := Find("cluster-node-loss") // node 0 lost at 25s, back at 40s; 10s windows
			s.Origin = mode
			res, err := Run(s, 1)
			if err != nil {
				t.Fatal(err)
			}
			node0 := res.Series[0].Admitted
			if node0[3] != 0 {
				t.Errorf("lost node-0 admitted %d in window 4, want 0", node0[3])
			}
			if node0[2] == 0 || node0[4] == 0 {
				t.Errorf("node-0 admitted %v per window: want some before the loss and after the join", node0)
			}
			if got := res.Series[1].Admitted[3] + res.Series[2].Admitted[3]; got < res.ReferenceSeries[3]*9/10 {
				t.Errorf("the survivors admitted %d in window 4, the model %d: node-0's traffic was not rerouted", got, res.ReferenceSeries[3])
			}
			if (res.Origin.RPCs > 0) != (mode == OriginCluster) {
				t.Errorf("%d peer RPCs in %s mode", res.Origin.RPCs, mode)
			}
		})
	}
}

// TestGlobalLatencyLetsMoreThrough checks that a global store whose writes
// take longer to show (two global intervals) lets the regions admit more
// than one that shows them at once, over three seeds. (The median of the
// denial spread is not compared: over its 40 samples it moves either way
// from seed to seed.)
func TestGlobalLatencyLetsMoreThrough(t *testing.T) {
	t.Parallel() // one core of simulation: the package's long runs share both
	for seed := range uint64(3) {
		s, _ := Find("two-regions-10x")
		base, err := Run(s, seed+1)
		if err != nil {
			t.Fatal(err)
		}
		s.GlobalLatency = 2 * s.GlobalInterval
		slow, err := Run(s, seed+1)
		if err != nil {
			t.Fatal(err)
		}
		if slow.OverPct <= base.OverPct {
			t.Errorf("seed %d: over-admission %v%% with a %v latency, %v%% without: want more", seed+1, slow.OverPct, s.GlobalLatency, base.OverPct)
		}
		if slow.GlobalLatency != "2s" {
			t.Errorf("result's global_latency %q, want 2s", slow.GlobalLatency)
		}
	}
}
