package sim

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestFitPower(t *testing.T) {
	for _, tc := range []struct {
		name   string
		xs, ys []float64
		a, b   float64
		ok     bool
	}{
		{"linear", []float64{1, 10, 100}, []float64{3, 30, 300}, 3, 1, true},
		{"square root", []float64{4, 16, 64}, []float64{2, 4, 8}, 1, 0.5, true},
		{"constant", []float64{1, 2, 4}, []float64{7, 7, 7}, 7, 0, true},
		{"zeros left out", []float64{1, 2, 4}, []float64{0, 2, 4}, 1, 1, true},
		{"one point left", []float64{1, 2}, []float64{0, 2}, 0, 0, false},
		{"no spread in x", []float64{3, 3}, []float64{1, 2}, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, ok := fitPower(tc.xs, tc.ys)
			if ok != tc.ok || ok && (math.Abs(a-tc.a) > 1e-9 || math.Abs(b-tc.b) > 1e-9) {
				t.Fatalf("fitPower = %v, %v, %v; want %v, %v, %v", a, b, ok, tc.a, tc.b, tc.ok)
			}
		})
	}
}

func TestHoldOutText(t *testing.T) {
	for _, tc := range []struct {
		name   string
		xs, ys []float64
		want   string
	}{
		{"on the line", []float64{1, 10, 100}, []float64{3, 30, 300}, "1.00"},
		{"measured twice the prediction", []float64{1, 10, 100}, []float64{3, 30, 600}, "0.50"},
		{"measured half of it", []float64{1, 10, 100}, []float64{3, 30, 150}, "2.00"},
		{"nothing measured at the last point", []float64{1, 10, 100}, []float64{3, 30, 0}, "–"},
		{"too few points", []float64{1, 10}, []float64{3, 30}, "–"},
		{"no fit over the others", []float64{1, 10, 100}, []float64{0, 30, 300}, "–"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := holdOutText(tc.xs, tc.ys); got != tc.want {
				t.Fatalf("holdOutText = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestScaleStudyShape checks that every series of the scale study varies
// one setting of the base point, that each scenario is valid and found by
// name, and that the tables name every series and cost.
func TestScaleStudyShape(t *testing.T) {
	series := ScaleStudy()
	results := make([][]Result, len(series))
	for i, sr := range series {
		if len(sr.Values) != len(sr.Scenarios) || len(sr.Values) < 3 {
			t.Fatalf("%s: %d values, %d scenarios", sr.Dimension, len(sr.Values), len(sr.Scenarios))
		}
		for _, s := range sr.Scenarios {
			if err := s.Validate(); err != nil {
				t.Fatalf("%s: %v", s.Name, err)
			}
			if _, ok := Find(s.Name); !ok {
				t.Fatalf("Find(%q) finds nothing", s.Name)
			}
			results[i] = append(results[i], Result{Requests: 1, Costs: Costs{RedisCallsPerRequest: float64(len(results[i]) + 1)}})
		}
	}
	var b bytes.Buffer
	if err := WriteScale(&b, series, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### identities", "### nodes", "### regions", "### load", "Fitted exponents", "Extrapolation checked", "Redis commands / request", "over-admission %"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the tables lack %q", want)
		}
	}
}

// TestScale1MIsTheTargetDeployment checks the built-in scale-1m against the
// deployment docs/capacity.md sizes, at its full size: 10
// regions of 20 nodes, a million Zipf 1.1 identities at one request per
// second each, 60 a minute allowed, a round a second, within the
// simulator's bound, found by name, outside the accuracy report, and held
// to the over-admission target by its band.
func TestScale1MIsTheTargetDeployment(t *testing.T) {
	s, ok := Find("scale-1m")
	if !ok {
		t.Fatal(`Find("scale-1m") finds nothing`)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, b := range Builtin() {
		if b.Name == s.Name {
			t.Fatal("scale-1m is in Builtin: --all and the accuracy report would run it")
		}
	}
	perSecond := s.Load * float64(s.Limit) / s.Window.Seconds() * float64(s.Identifiers)
	tests := []struct {
		name      string
		got, want float64
	}{
		{"regions", float64(s.Regions), 10},
		{"nodes per region", float64(s.Nodes), 20},
		{"identities", float64(s.Identifiers), 1_000_000},
		{"requests per second", perSecond, 1_000_000},
		{"requests per second per identity", perSecond / float64(s.Identifiers), 1},
		{"limit per minute", float64(s.Limit) * float64(time.Minute) / float64(s.Window), 60},
		{"Zipf exponent", s.Skew, 1.1},
		{"global interval (s)", s.GlobalInterval.Seconds(), 1},
		{"over-admission band's top (%)", s.Band.MaxOverPct, 5},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if !strings.Contains(s.Description, "at full size") {
		t.Errorf("the description does not say the run is at full size: %q", s.Description)
	}
}
