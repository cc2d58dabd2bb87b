package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSimAll runs `sluice sim --all --out DIR` twice in separate processes:
// it must finish well within two minutes, exit 0 (every scenario in its
// band), and write the same bytes both times; another seed must change the
// figures and keep every scenario in its band.
func TestSimAll(t *testing.T) {
	sim := func(args ...string) (stdout []byte, elapsed time.Duration) {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"sim"}, args...)...)
		cmd.Env = cleanEnv()
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("sluice sim %v: %v\n%s%s", args, err, out.String(), errOut.String())
		}
		return out.Bytes(), time.Since(start)
	}
	dirs := []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	for _, dir := range dirs {
		_, elapsed := sim("--all", "--out", dir)
		t.Logf("sluice sim --all: %v", elapsed.Round(time.Millisecond))
		if elapsed > time.Minute {
			t.Errorf("sluice sim --all took %v; it must stay well under two minutes", elapsed)
		}
	}
	files, err := os.ReadDir(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	svgs := 0
	for _, f := range files {
		a, _ := os.ReadFile(filepath.Join(dirs[0], f.Name()))
		b, err := os.ReadFile(filepath.Join(dirs[1], f.Name()))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs with the same seed (%v)", f.Name(), err)
		}
		if strings.HasSuffix(f.Name(), ".svg") {
			svgs++
		}
	}
	if svgs < 10 {
		t.Errorf("%d charts written, want one per scenario", svgs)
	}
	first, _ := os.ReadFile(filepath.Join(dirs[0], "results.json"))
	other, _ := sim("--all", "--seed", "2", "--json") // exits 0 only if every scenario stays in its band
	if bytes.Equal(first, other) || !bytes.Contains(other, []byte(`"seed": 2`)) {
		t.Error("seed 2 gave the figures of seed 1")
	}
}

// TestSimMalformedFiles checks the exit status and message of a malformed
// scenario file and of malformed traces, CSV and JSON lines.
func TestSimMalformedFiles(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		args       []string
		want       string
	}{
		{"bad.yaml", "name: bad\nnodes: 3\nlimit: 10\nwindow: 10\n", nil, ":4: field window: want a duration"},
		{"bad.csv", "time,identifier,cost\n1800000000000,a,1\n1800000000005,b,lots\n", []string{"--limit", "5", "--duration", "1s"}, ":3: field cost: want a non-negative integer"},
		{"bad.jsonl", `{"time": 1800000000000, "identifier": "a", "colour": "red"}`, []string{"--limit", "5", "--duration", "1s"}, ":1: field colour: unknown member"},
	} {
		file := filepath.Join(dir, tc.name)
		if err := os.WriteFile(file, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"sim", file}
		if tc.args != nil {
			args = append([]string{"sim", "--trace", file}, tc.args...)
		}
		cmd := exec.Command(binary, args...)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
			t.Errorf("%s: exit %d (%v), want 1", tc.name, code, err)
		}
		if want := file + tc.want; !strings.Contains(string(out), want) {
			t.Errorf("%s: output %q does not contain %q", tc.name, out, want)
		}
	}
}
