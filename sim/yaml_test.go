package sim

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadFileMatchesBuiltin(t *testing.T) {
	got, err := LoadFile(filepath.Join("testdata", "origin-outage.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Find("origin-outage")
	if got, want := got.withDefaults(), want.withDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("file:\n%+v\nbuilt in:\n%+v", got, want)
	}
}

func TestParseDefaultsAndFaults(t *testing.T) {
	s, err := Parse("x.yaml", []byte(`
name: two-regions
nodes: 2
regions: 2
limit: 50
window: 1m
windows: 3
load: 1.5
origin_margin: -1
origin_loss: 0.1
global_loss: 0.25
replay_latency: 40ms
global_latency: 500ms
faults:
  - {kind: origin-outage, at: 10s, until: 20s, regions: [1]}
  - {kind: restart, at: 30s, node: 3}
  - {kind: global-outage, at: 1m, until: 2m}
band: {min_over_pct: 0, max_over_pct: 2.5}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Scenario{
		Name: "two-regions", Regions: 2, Nodes: 2, Limit: 50, Window: time.Minute, Windows: 3, Load: 1.5,
		Identifiers: 1, OriginMargin: -1, OriginLoss: 0.1, GlobalLoss: 0.25, ReplayLatency: 40 * time.Millisecond, GlobalLatency: 500 * time.Millisecond, Band: Band{MinOverPct: 0, MaxOverPct: 2.5},
		Faults: []Fault{
			{Kind: OriginOutage, At: 10 * time.Second, Until: 20 * time.Second, Regions: []int{1}},
			{Kind: Restart, At: 30 * time.Second, Node: 3},
			{Kind: GlobalOutage, At: time.Minute, Until: 2 * time.Minute},
		},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("got\n%+v\nwant\n%+v", s, want)
	}
}

func TestParseClusterAndJitter(t *testing.T) {
	s, err := Parse("x.yaml", []byte(`
name: cluster
nodes: 3
limit: 10
window: 10s
windows: 2
load: 2
origin: cluster
failure_detection: 2s
replay_latency: 40ms
replay_jitter: 20ms
faults:
  - {kind: node-loss, at: 5s, node: 1}
  - {kind: node-loss, at: 6s, until: 9s, node: 2}
band: {min_over_pct: 0, max_over_pct: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Scenario{
		Name: "cluster", Regions: 1, Nodes: 3, Limit: 10, Window: 10 * time.Second, Windows: 2, Load: 2, Identifiers: 1,
		Origin: OriginCluster, FailureDetection: 2 * time.Second, ReplayLatency: 40 * time.Millisecond, ReplayJitter: 20 * time.Millisecond,
		Faults: []Fault{{Kind: NodeLoss, At: 5 * time.Second, Node: 1}, {Kind: NodeLoss, At: 6 * time.Second, Until: 9 * time.Second, Node: 2}},
		Band:   Band{MinOverPct: 0, MaxOverPct: 5},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("got\n%+v\nwant\n%+v", s, want)
	}
	if _, err := Run(s, 1); err != nil {
		t.Errorf("run: %v", err)
	}
}

// TestParseErrors checks that every malformed file is refused with an error
// naming the file, the line and the field.
func TestParseErrors(t *testing.T) {
	const head = "name: x\nnodes: 3\nlimit: 100\nwindow: 10s\nwindows: 6\nload: 2\nband: {min_over_pct: 0, max_over_pct: 1}\n"
	tests := []struct {
		name, yaml string
		want       string // the error's text after the file name
	}{
		{"unknown field", head + "nodez: 3\n", "bad.yaml:8: field nodez: unknown field"},
		{"repeated field", head + "limit: 5\n", "bad.yaml:8: field limit: repeated (first at line 3)"},
		{"wrong type", strings.Replace(head, "nodes: 3", "nodes: three", 1), `bad.yaml:2: field nodes: want an integer, got "three"`},
		{"float for an integer", strings.Replace(head, "limit: 100", "limit: 1.5", 1), `bad.yaml:3: field limit: want an integer, got "1.5"`},
		{"duration without unit", strings.Replace(head, "window: 10s", "window: 10", 1), `bad.yaml:4: field window: want a duration`},
		{"missing field", strings.Replace(head, "load: 2\n", "", 1), "bad.yaml:1: field load: required, missing"},
		{"invalid value", strings.Replace(head, "nodes: 3", "nodes: 0", 1), "bad.yaml:2: field nodes: 0 is below 1"},
		{"too many requests", head + "identifiers: 50001\n", "bad.yaml:6: field load: the run would send about 60001200 requests, more than 60000000"},
		{"invalid name", strings.Replace(head, "name: x", "name: X Y", 1), `bad.yaml:1: field name: "X Y" is not`},
		{"band order", strings.Replace(head, "max_over_pct: 1", "max_over_pct: -1", 1), "bad.yaml:7: field band: min 0 is above max -1"},
		{"band field", strings.Replace(head, "max_over_pct", "max", 1), "bad.yaml:7: field band.max: unknown field"},
		{"fault field", head + "faults:\n  - kind: restart\n    at: 1s\n    nod: 1\n", "bad.yaml:11: field faults[0].nod: unknown field"},
		{"fault value", head + "faults:\n  - kind: restart\n    at: 1s\n  - kind: origin-outage\n    at: 5s\n    until: 2s\n", "bad.yaml:13: field faults[1].until: 2s is not after at (5s)"},
		{"fault region", head + "faults:\n  - kind: origin-outage\n    at: 1s\n    until: 2s\n    regions: [0, 4]\n", "bad.yaml:12: field faults[0].regions[1]: 4 is not a region"},
		{"fault missing kind", head + "faults:\n  - at: 1s\n", "bad.yaml:9: field faults[0].kind: required, missing"},
		{"faults not a list", head + "faults: restart\n", `bad.yaml:8: field faults: want a list of faults, got "restart"`},
		{"not a mapping", "- a\n- b\n", "bad.yaml:1: field (document): want a mapping"},
		{"syntax", "name: [x\n", "bad.yaml: yaml: line"},
		{"two documents", head + "---\nname: y\n", "bad.yaml:8: one scenario per file"},
		{"empty", "", "bad.yaml: empty scenario file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), "sim: "+tc.want) {
				t.Errorf("got %v\nwant sim: %s…", err, tc.want)
			}
		})
	}
}

// TestCapacityScenarioFiles loads every scenario file
// docs/capacity.md runs: each is valid, within the simulator's
// bound, and named after its file.
func TestCapacityScenarioFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "docs", "capacity", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario file in docs/capacity (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := LoadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimSuffix(filepath.Base(f), ".yaml"); s.Name != want {
				t.Errorf("name %q, want %q", s.Name, want)
			}
		})
	}
}

func TestLoadFileMissing(t *testing.T) {
	_, err := LoadFile(filepath.Join(t.TempDir(), "none.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("got %v", err)
	}
}
