package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goodRLS is a valid Envoy RLS domain file.
const goodRLS = `domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: path
    value: /login
    descriptors:
      - key: user
        rate_limit:
          unit: minute
          requests_per_unit: 5
`

// checkCase is one configuration for TestCheck.
type checkCase struct {
	name  string
	files map[string]string // name -> content, written in the folder
	env   map[string]string
	args  []string // DIR/ is replaced by the folder
	code  int
	want  []string // lines of stdout, in order, DIR/ replaced
}

// checkCases are TestCheck's configurations; in files, args, env and want,
// DIR/ stands for the case's folder.
var checkCases = []checkCase{
	{
		name: "good config",
		files: map[string]string{
			"sluice.yaml": "http-addr: 0.0.0.0:7070\nregion: eu\nroot-key-file: DIR/keys\nrls-config: DIR/rls.yaml\nmax-conns: 500\n",
			"keys":        "# root keys\n0123456789abcdef:acme\n",
			"rls.yaml":    goodRLS,
		},
		args: []string{"--config", "DIR/sluice.yaml"},
		want: []string{"ok: serve would listen on 0.0.0.0:7070 (admin \"127.0.0.1:7071\"), region eu, origin memory, store sqlite, 1 root key(s), Envoy RLS from DIR/rls.yaml"},
	},
	{
		name:  "good config from SLUICE_CONFIG and a flag",
		files: map[string]string{"sluice.yaml": "region: us\n"},
		env:   map[string]string{"SLUICE_CONFIG": "DIR/sluice.yaml"},
		args:  []string{"--max-counters", "1000"},
		want:  []string{"ok: serve would listen on 127.0.0.1:7070 (admin \"127.0.0.1:7071\"), region us, origin memory, store sqlite, 0 root key(s)"},
	},
	{
		name:  "bad yaml",
		files: map[string]string{"sluice.yaml": "region: eu\nroot-key: [a:b\nmax-conns: 3\n"},
		args:  []string{"--config=DIR/sluice.yaml"},
		code:  1,
		want:  []string{"DIR/sluice.yaml:2: did not find expected ',' or ']'"},
	},
	{
		name:  "unknown key",
		files: map[string]string{"sluice.yaml": "region: eu\n\nredis_uri: redis://127.0.0.1:6379\n"},
		args:  []string{"--config", "DIR/sluice.yaml"},
		code:  1,
		want:  []string{`DIR/sluice.yaml:3: unknown key "redis_uri" (keys are the flags of sluice serve, e.g. http-addr)`},
	},
	{
		name:  "bad value with its line",
		files: map[string]string{"sluice.yaml": "region: eu\nmax-conns: lots\nshutdown-timeout: soon\n"},
		args:  []string{"--config", "DIR/sluice.yaml"},
		code:  1,
		want: []string{
			`DIR/sluice.yaml:2: --max-conns: expected a valid 64 bit int but got "lots"`,
			`DIR/sluice.yaml:3: --shutdown-timeout: expected duration but got "soon": time: invalid duration "soon"`,
		},
	},
	{
		name:  "bad enum and list for a single value",
		files: map[string]string{"sluice.yaml": "origin: disk\nregion: [eu, us]\nregion: eu\n"},
		args:  []string{"--config", "DIR/sluice.yaml"},
		code:  1,
		want: []string{
			`DIR/sluice.yaml:1: --origin must be one of "memory", "redis", "cluster", "", not "disk"`,
			`DIR/sluice.yaml:2: --region takes one value, not a list`,
			`DIR/sluice.yaml:3: key "region" is set again (first at line 2)`,
		},
	},
	{
		name:  "values that serve refuses, each with its line",
		files: map[string]string{"sluice.yaml": "region: eu\nhttp-addr: nowhere\nmax-conns: 0\norigin: redis\n"},
		args:  []string{"--config", "DIR/sluice.yaml", "--otel-sample-ratio", "2"},
		code:  1,
		want: []string{
			`DIR/sluice.yaml:2: --http-addr "nowhere": address nowhere: missing port in address`,
			`DIR/sluice.yaml:4: --origin redis needs --redis-url`,
			`DIR/sluice.yaml:3: --max-conns must be at least 1`,
			`command line: --otel-sample-ratio 2: want a number from 0 to 1`,
		},
	},
	{
		name: "bad flag value",
		args: []string{"--max-conns", "many"},
		code: 1,
		want: []string{`command line: --max-conns: expected a valid 64 bit int but got "many"`},
	},
	{
		name: "bad variable value",
		env:  map[string]string{"SLUICE_LOG_LEVEL": "loud"},
		code: 1,
		want: []string{`$SLUICE_LOG_LEVEL: --log-level must be one of "debug","info","warn","error" but got "loud"`},
	},
	{
		name: "unknown flag",
		args: []string{"--redis-uri", "redis://x"},
		code: 1,
		want: []string{"command line: unknown flag --redis-uri, did you mean \"--redis-url\"?"},
	},
	{
		name:  "root key file with a bad line",
		files: map[string]string{"keys": "0123456789abcdef:acme\nshort:acme\n"},
		args:  []string{"--http-addr", ":7070", "--root-key-file", "DIR/keys"},
		code:  1,
		want:  []string{"command line: --root-key-file DIR/keys, line 2: server: invalid root key: the key of workspace \"acme\" is 5 bytes long; a root key must be at least 16 bytes (e.g. openssl rand -hex 32)"},
	},
	{
		name: "public address without a root key",
		args: []string{"--http-addr", "0.0.0.0:7070"},
		code: 1,
		want: []string{"command line: --http-addr 0.0.0.0:7070 is not a loopback address and no root key is configured: serve refuses to start; set --root-key-sha256, --root-key-file or SLUICE_ROOT_KEYS"},
	},
	{
		name:  "rls unknown field and wrong type, each with its line",
		files: map[string]string{"rls.yaml": "domain: edge\ndescriptors:\n  - key: a\n    rate_limt: {}\n  - key: b\n    shadow_mode: maybe\n"},
		args:  []string{"--rls-config", "DIR/rls.yaml"},
		code:  1,
		want: []string{
			"DIR/rls.yaml:4: field rate_limt not found in type rls.descriptor",
			"DIR/rls.yaml:6: cannot unmarshal !!str `maybe` into bool",
		},
	},
	{
		name:  "rls bad unit at its rate_limit line",
		files: map[string]string{"rls.yaml": "domain: edge\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        value: x\n        rate_limit:\n          unit: fortnight\n          requests_per_unit: 1\n"},
		args:  []string{"--rls-config", "DIR/rls.yaml"},
		code:  1,
		want:  []string{`DIR/rls.yaml:7: domain "edge": descriptor "a > b=x": unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`},
	},
	{
		name:  "rls duplicate descriptor at its second line",
		files: map[string]string{"rls.yaml": "domain: edge\ndescriptors:\n  - key: a\n  - key: b\n  - key: a\n"},
		args:  []string{"--rls-config", "DIR/rls.yaml"},
		code:  1,
		want:  []string{`DIR/rls.yaml:5: domain "edge": duplicate descriptor "a"`},
	},
	{
		name: "rls folder: a bad yaml file and a domain twice",
		files: map[string]string{
			"rls/a.yaml": goodRLS,
			"rls/b.yaml": "domain: other\ndescriptors: [\n",
			"rls/c.yml":  "# the same domain again\ndomain: edge\n",
			"rls/notes":  "not yaml: [",
		},
		args: []string{"--rls-config", "DIR/rls"},
		code: 1,
		want: []string{
			"DIR/rls/b.yaml:3: did not find expected node content",
			`DIR/rls/c.yml:2: domain "edge" is configured in DIR/rls/a.yaml too (one file per domain)`,
		},
	},
	{
		name: "missing files",
		args: []string{"--rls-config", "DIR/nope.yaml", "--tls-cert", "DIR/cert.pem", "--tls-key", "DIR/key.pem"},
		code: 1,
		want: []string{
			"command line: --tls-cert/--tls-key: open DIR/cert.pem: no such file or directory",
			"DIR/nope.yaml: no such file or directory",
		},
	},
	{
		name: "help",
		args: []string{"--help"},
		want: nil, // checked below: the usage
	},
}

// TestCheck runs `sluice check` on configurations, each in a folder of its
// own (FILE below stands for it), and compares its exit status and output.
func TestCheck(t *testing.T) {
	for _, tc := range checkCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			expand := func(s string) string { return strings.ReplaceAll(s, "DIR/", dir+"/") }
			for name, content := range tc.files {
				path := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(expand(content)), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			for k, v := range tc.env {
				t.Setenv(k, expand(v))
			}
			args := []string{"check"}
			for _, a := range tc.args {
				args = append(args, expand(a))
			}
			var out, errOut bytes.Buffer
			code := run(context.Background(), args, strings.NewReader(""), &out, &errOut)
			if code != tc.code {
				t.Fatalf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out.String(), errOut.String())
			}
			if tc.name == "help" {
				if !strings.Contains(out.String(), "Usage: sluice check") || !strings.Contains(out.String(), "--rls-config") {
					t.Fatalf("no usage in %q", out.String())
				}
				return
			}
			got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
			var want []string
			for _, w := range tc.want {
				want = append(want, expand(w))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("stdout:\n%s\nwant:\n%s\nstderr: %s", strings.Join(got, "\n"), strings.Join(want, "\n"), errOut.String())
			}
		})
	}
}

// TestCheckArgs checks which command lines run check, and what it gets.
func TestCheckArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		ok   bool
		rest []string
	}{
		{"check alone", []string{"check"}, true, []string{}},
		{"check with flags", []string{"check", "--region", "eu"}, true, []string{"--region", "eu"}},
		{"config before check", []string{"--config", "f.yaml", "check", "-h"}, true, []string{"--config", "f.yaml", "-h"}},
		{"config= before check", []string{"--config=f.yaml", "check"}, true, []string{"--config=f.yaml"}},
		{"serve", []string{"serve", "check"}, false, nil},
		{"help first", []string{"--help", "check"}, false, nil},
		{"nothing", nil, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rest, ok := checkArgs(tc.args)
			if ok != tc.ok || (ok && !slices.Equal(rest, tc.rest)) {
				t.Fatalf("checkArgs(%q) = %q, %v; want %q, %v", tc.args, rest, ok, tc.rest, tc.ok)
			}
		})
	}
}
