package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// unitDir is the folder of the systemd unit and its settings file.
const unitDir = "../../deploy/systemd"

// unitFile is a systemd unit file read by readUnit: each directive's
// values, in order, by "Section.Key".
type unitFile map[string][]string

// readUnit parses the unit file at path: sections, Key=Value lines, '#'
// and ';' comments, and lines continued with a trailing backslash.
func readUnit(t *testing.T, path string) unitFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unitFile{}
	section, pending := "", ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if pending == "" && (line == "" || line[0] == '#' || line[0] == ';') {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			pending += cont + " "
			continue
		}
		line, pending = pending+line, ""
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: not Key=Value: %q", path, line)
		}
		u[section+"."+strings.TrimSpace(key)] = append(u[section+"."+strings.TrimSpace(key)], strings.TrimSpace(value))
	}
	return u
}

// unitCommand splits a command line of the unit into the sluice arguments
// after the executable, with the specifiers %d (the credentials folder)
// and %S (the state folder's parent) replaced.
func unitCommand(t *testing.T, line, creds, state string) []string {
	t.Helper()
	words := strings.Fields(line)
	if len(words) < 2 || words[0] != "/usr/local/bin/sluice" {
		t.Fatalf("command %q: want /usr/local/bin/sluice and a subcommand", line)
	}
	args := words[1:]
	for i, a := range args {
		a = strings.ReplaceAll(a, "%d", creds)
		a = strings.ReplaceAll(a, "%S", state)
		if strings.ContainsAny(a, "%$\"'") {
			t.Fatalf("argument %q: a specifier, variable or quote the test does not expand", a)
		}
		args[i] = a
	}
	return args
}

// unitEnv returns the SLUICE_* settings of the unit's settings file: those
// in force, and those shown commented out.
func unitEnv(t *testing.T) (set map[string]string, commented []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(unitDir, "sluice.env"))
	if err != nil {
		t.Fatal(err)
	}
	set = map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		name, value, ok := strings.Cut(line, "=")
		switch {
		case !ok || strings.HasPrefix(name, "# "):
		case strings.HasPrefix(name, "#"):
			commented = append(commented, name[1:])
		default:
			set[name] = value
		}
	}
	return set, commented
}

// TestSystemdUnit checks deploy/systemd/sluice.service: its hardening, that
// the flags of ExecStart are accepted by serve's parser and, with the
// settings of sluice.env, pass `sluice check`, as do those of ExecStartPre,
// that every variable of sluice.env names a flag, and that systemd-analyze
// verify (where installed) accepts the unit.
func TestSystemdUnit(t *testing.T) {
	u := readUnit(t, filepath.Join(unitDir, "sluice.service"))
	t.Run("hardening", func(t *testing.T) { checkHardening(t, u) })

	creds, state := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(creds, "root-key"), []byte("0123456789abcdef0123456789abcdef:acme\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set, commented := unitEnv(t)
	for k, v := range set {
		t.Setenv(k, v)
	}
	t.Run("settings name flags", func(t *testing.T) {
		known := serveEnvVars(t)
		for _, name := range append(slices.Sorted(maps.Keys(set)), commented...) {
			if !known[name] {
				t.Errorf("sluice.env sets %s, which is no flag's variable", name)
			}
		}
	})
	for _, directive := range []string{"Service.ExecStart", "Service.ExecStartPre"} {
		t.Run(directive, func(t *testing.T) {
			lines := u[directive]
			if len(lines) != 1 {
				t.Fatalf("%s: %d lines, want 1", directive, len(lines))
			}
			args := unitCommand(t, lines[0], creds, state)
			checkUnitArgs(t, args)
		})
	}
	t.Run("systemd-analyze verify", func(t *testing.T) { verifyUnit(t) })
}

// checkHardening fails unless the unit sets each of the directives that
// docs/howto/deploy.md promises.
func checkHardening(t *testing.T, u unitFile) {
	for _, tc := range []struct{ directive, want string }{
		{"Service.DynamicUser", "yes"},
		{"Service.NoNewPrivileges", "yes"},
		{"Service.ProtectSystem", "strict"},
		{"Service.PrivateTmp", "yes"},
		{"Service.ProtectHome", "yes"},
		{"Service.CapabilityBoundingSet", ""},
		{"Service.LimitNOFILE", "65536"},
		{"Service.Restart", "on-failure"},
		{"Service.LoadCredential", "root-key:/etc/sluice/root-key"},
		{"Service.StateDirectory", "sluice"},
		{"Service.EnvironmentFile", "-/etc/sluice/sluice.env"},
	} {
		if got := u[tc.directive]; !slices.Contains(got, tc.want) {
			t.Errorf("%s = %q, want %q", tc.directive, got, tc.want)
		}
	}
}

// checkUnitArgs parses args (serve or check and their flags) with the
// parser of run, then runs `sluice check` on the same flags: both must
// accept them.
func checkUnitArgs(t *testing.T, args []string) {
	t.Helper()
	var c cli
	exit := -1
	parser, err := newParser(&c, "sluice", "", io.Discard, io.Discard, &exit)
	if err != nil {
		t.Fatal(err)
	}
	if args[0] == "serve" {
		if _, err := parser.Parse(args); err != nil {
			t.Fatalf("sluice %q: %v", args, err)
		}
	}
	var out, errOut bytes.Buffer
	checkArgs := append([]string{"check"}, args[1:]...)
	if code := run(context.Background(), checkArgs, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("sluice %q: exit status %d\n%s%s", checkArgs, code, out.String(), errOut.String())
	}
	if !strings.HasPrefix(out.String(), "ok: serve would listen on 0.0.0.0:7070") {
		t.Fatalf("sluice %q printed %q", checkArgs, out.String())
	}
}

// serveEnvVars returns the environment variables that serve's flags read.
func serveEnvVars(t *testing.T) map[string]bool {
	t.Helper()
	var c cli
	exit := -1
	parser, err := newParser(&c, "sluice", "", io.Discard, io.Discard, &exit)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, n := range parser.Model.Children {
		if n.Name != "serve" {
			continue
		}
		for _, f := range n.Flags {
			for _, e := range f.Envs {
				known[e] = true
			}
		}
	}
	if len(known) < 20 {
		t.Fatalf("found only %d variables of serve: %v", len(known), known)
	}
	return known
}

// verifyUnit runs systemd-analyze verify on a copy of the unit whose
// executable is this test binary (verify checks that the executable
// exists), and fails on any message about the unit.
func verifyUnit(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the unit's syntax is not verified")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(unitDir, "sluice.service"))
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(t.TempDir(), "sluice.service")
	if err := os.WriteFile(copyPath, bytes.ReplaceAll(data, []byte("/usr/local/bin/sluice"), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool, "verify", copyPath).CombinedOutput()
	if err != nil || regexp.MustCompile(`sluice\.service`).Match(out) {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
