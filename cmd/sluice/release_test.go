package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// repoRoot is the repository's root, from this package's folder.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// releaseStamp is what TestReleaseScript stamps into the binary.
var releaseStamp = map[string]string{
	"VERSION": "v9.8.7-test",
	"COMMIT":  "0123456789abcdef0123456789abcdef01234567",
	"DATE":    "2026-01-02T03:04:05Z",
}

// buildRelease runs scripts/release.sh for linux/<host arch> into a new
// folder with the stamp of releaseStamp and returns the folder and the
// binary's name. It skips the test where the script cannot run.
func buildRelease(t *testing.T) (dist, name string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a release binary with scripts/release.sh: skipped under -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the release test runs the linux binary it builds")
	}
	for _, tool := range []string{"bash", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("scripts/release.sh needs %s: %v", tool, err)
		}
	}
	dist = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // a cold build cache compiles every dependency
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "scripts", "release.sh"))
	cmd.Env = append(os.Environ(), "TARGETS=linux/"+runtime.GOARCH, "DIST="+dist)
	for k, v := range releaseStamp {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh: %v\n%s", err, out)
	}
	t.Logf("scripts/release.sh built linux/%s in %v", runtime.GOARCH, time.Since(start).Round(time.Millisecond))
	return dist, "sluice-linux-" + runtime.GOARCH
}

// TestReleaseScript builds the host's target with scripts/release.sh and
// checks the binary (static, trimmed paths, no cgo), the version it prints,
// and SHA256SUMS (with sha256sum -c, and against the file's own digest).
func TestReleaseScript(t *testing.T) {
	dist, name := buildRelease(t)
	bin := filepath.Join(dist, name)
	t.Run("static", func(t *testing.T) { checkStatic(t, bin) })
	t.Run("build settings", func(t *testing.T) { checkBuildSettings(t, bin) })
	t.Run("version", func(t *testing.T) {
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("sluice version: %v\n%s", err, out)
		}
		want := "sluice v9.8.7-test\ncommit: 0123456789abcdef0123456789abcdef01234567\nbuilt:  2026-01-02T03:04:05Z\ngo:     " +
			runtime.Version() + " linux/" + runtime.GOARCH + "\n"
		if string(out) != want {
			t.Fatalf("sluice version printed\n%s\nwant\n%s", out, want)
		}
	})
	t.Run("SHA256SUMS", func(t *testing.T) { checkSums(t, dist, name) })
}

// checkStatic fails unless bin is an ELF executable with no interpreter
// (PT_INTERP) and no shared library (DT_NEEDED).
func checkStatic(t *testing.T, bin string) {
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary has a PT_INTERP program header: it is dynamically linked")
		}
	}
	needed, err := f.DynString(elf.DT_NEEDED)
	if err != nil {
		t.Fatal(err)
	}
	if len(needed) > 0 {
		t.Fatalf("the binary needs shared libraries: %v", needed)
	}
}

// checkBuildSettings fails unless bin was built without cgo, with
// -trimpath, and holds no path of this checkout.
func checkBuildSettings(t *testing.T, bin string) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Fatalf("CGO_ENABLED=%q -trimpath=%q, want 0 and true", settings["CGO_ENABLED"], settings["-trimpath"])
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if root := repoRoot(t); bytes.Contains(data, []byte(root+"/")) {
		t.Fatalf("the binary holds the checkout's path %s", root)
	}
}

// checkSums fails unless dist/SHA256SUMS has exactly one line, for name,
// with its SHA-256, and sha256sum -c accepts it.
func checkSums(t *testing.T, dist, name string) {
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dist, name))
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256(data)
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if want := hex.EncodeToString(digest[:]) + "  " + name; len(lines) != 1 || lines[0] != want {
		t.Fatalf("SHA256SUMS is %q, want the one line %q", lines, want)
	}
	cmd := exec.Command("sha256sum", "-c", "SHA256SUMS")
	cmd.Dir = dist
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), name+": OK") {
		t.Fatalf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
	}
}
