package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func runSim(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"sim"}, args...), strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestSimList(t *testing.T) {
	code, out, errOut := runSim(t, "--list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, name := range []string{"one-node", "region-10x", "spread-8-regions", "origin-outage", "global-outage", "node-restart", "scale-1m"} {
		if !strings.Contains(out, "\n"+name+" ") {
			t.Errorf("--list does not name %s:\n%s", name, out)
		}
	}
}

// TestSimOutAndJSON runs two scenarios with --out, then again with --json:
// the files are written, results.json on stdout is the file byte for byte,
// and a scenario file runs beside a built-in one.
func TestSimOutAndJSON(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(file, []byte("name: mine\nnodes: 2\nlimit: 20\nwindow: 2s\nwindows: 3\nload: 3\nband: {min_over_pct: 0, max_over_pct: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	code, stdout, stderr := runSim(t, "region-2x", file, "--seed", "5", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "| region-2x |") || !strings.Contains(stdout, "| mine |") || !strings.Contains(stdout, "2 scenarios, seed 5") {
		t.Errorf("summary:\n%s", stdout)
	}
	for _, f := range []string{"report.md", "results.json", "region-2x.svg", "mine.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	code, stdout, stderr = runSim(t, "region-2x", file, "--seed", "5", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	written, _ := os.ReadFile(filepath.Join(out, "results.json"))
	if stdout != string(written) {
		t.Error("--json differs from results.json written with the same seed")
	}
	var rep struct {
		Seed      uint64 `json:"seed"`
		Scenarios []struct {
			Scenario string `json:"scenario"`
			InBand   bool   `json:"in_band"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.Seed != 5 || len(rep.Scenarios) != 2 || rep.Scenarios[1].Scenario != "mine" {
		t.Errorf("--json: %v %+v", err, rep)
	}
}

func TestSimErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: bad\nnodes: 2\nlimit: 20\nwindow: 2s\nwindows: 3\nload: 3\nband: {min_over_pct: 0, max_over_pct: 5}\nnode: 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	narrow := filepath.Join(dir, "narrow.yaml")
	if err := os.WriteFile(narrow, []byte("name: narrow\nnodes: 3\nlimit: 100\nwindow: 10s\nwindows: 4\nload: 2\nidentifiers: 3\nfaults: [{kind: origin-outage, at: 15s, until: 25s}]\nband: {min_over_pct: 0, max_over_pct: 0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badTrace := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(badTrace, []byte("time,identifier,cost\n1800000000000,a,1\n1800000000001,a,x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"malformed file", []string{bad}, 1, "sim: " + bad + ":8: field node: unknown field"},
		{"missing file", []string{filepath.Join(dir, "none.yaml")}, 1, "none.yaml"},
		{"unknown name", []string{"no-such-scenario"}, 1, `no built-in scenario or file "no-such-scenario"`},
		{"nothing to run", nil, 1, "pass --all, --trace or --list"},
		{"the scale study with a scenario", []string{"--scale", "region-2x"}, 1, "--scale runs the scale study alone"},
		{"malformed trace", []string{"--trace", badTrace, "--limit", "5", "--duration", "1s"}, 1, "sim: " + badTrace + ":3: field cost: want a non-negative integer"},
		{"trace without a limit", []string{"--trace", badTrace}, 1, "--trace needs --limit and --duration"},
		{"limit without a trace", []string{"one-node", "--limit", "5"}, 1, "--limit and --duration go with --trace"},
		{"twice", []string{"one-node", "one-node"}, 1, "named twice"},
		{"out of band", []string{narrow}, 1, "sim: out of their band: narrow"},
		{"bad seed", []string{"one-node", "--seed", "-1"}, 2, "--seed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runSim(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

// TestSimTrace replays a JSON lines trace through two regions and checks
// the summary names it and its chart is written.
func TestSimTrace(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&b, `{"time": %d, "identifier": "user-%d", "region": %d}`+"\n", 1_800_000_000_000+int64(i)*7, i%4, i%2)
	}
	trace := filepath.Join(dir, "My Log.jsonl")
	if err := os.WriteFile(trace, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	code, stdout, stderr := runSim(t, "--trace", trace, "--regions", "2", "--nodes", "2", "--limit", "50", "--duration", "5s", "--global-interval", "500ms", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "| trace-my-log | 2 regions × 2 nodes |") {
		t.Errorf("summary:\n%s", stdout)
	}
	if _, err := os.Stat(filepath.Join(out, "trace-my-log.svg")); err != nil {
		t.Error(err)
	}

	// The same log through one region in cluster mode.
	code, stdout, stderr = runSim(t, "--trace", trace, "--origin", "cluster", "--regions", "2", "--nodes", "3", "--limit", "50", "--duration", "5s", "--json")
	if code != 0 {
		t.Fatalf("--origin cluster: exit %d: %s", code, stderr)
	}
	var rep struct {
		Scenarios []struct {
			Origin struct {
				Kind string `json:"kind"`
				RPCs int64  `json:"rpcs"`
			} `json:"origin"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || len(rep.Scenarios) != 1 {
		t.Fatalf("--json: %v\n%s", err, stdout)
	}
	if o := rep.Scenarios[0].Origin; o.Kind != "cluster" || o.RPCs == 0 {
		t.Errorf("--origin cluster ran with origin %+v, want cluster mode with peer RPCs", o)
	}
	if code, _, stderr := runSim(t, "--trace", trace, "--origin", "redis", "--limit", "50", "--duration", "5s"); code == 0 || !strings.Contains(stderr, "--origin") {
		t.Errorf("--origin redis: exit %d, %s; want a usage error naming --origin", code, stderr)
	}
}

func TestSimProgress(t *testing.T) {
	var b bytes.Buffer
	p := progress{w: &b, total: 4}
	p.step("one-node")
	p.step("region-2x")
	p.done()
	p.done() // erases once
	want := "\r\x1b[Ksim [....................] 1/4 one-node" +
		"\r\x1b[Ksim [#####...............] 2/4 region-2x" +
		"\r\x1b[K"
	if b.String() != want {
		t.Errorf("got %q\nwant %q", b.String(), want)
	}
	quiet := progress{total: 2}
	quiet.step("x")
	quiet.done() // no writer: nothing to draw, no panic

	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if isTerminal(null) {
		t.Error("the null device counts as a terminal")
	}
	file, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if isTerminal(file) {
		t.Error("a regular file counts as a terminal")
	}
}

// TestSimGCPercent: a run sets the collector's target to simGCPercent
// unless GOGC is set, which it then leaves alone.
func TestSimGCPercent(t *testing.T) {
	tests := []struct {
		name, gogc string
		want       int
	}{
		{"GOGC unset", "", simGCPercent},
		{"GOGC set", "100", 80}, // what the test set before the run
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOGC", tt.gogc)
			defer debug.SetGCPercent(debug.SetGCPercent(80))
			if code, _, errOut := runSim(t, "one-node"); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if got := debug.SetGCPercent(80); got != tt.want {
				t.Errorf("GC target %d after the run, want %d", got, tt.want)
			}
		})
	}
}
