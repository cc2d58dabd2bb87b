package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

func TestRootKeyFile(t *testing.T) {
	const k1, k2 = "first-key-0123456789", "second:key:0123456789"
	for _, tc := range []struct {
		name    string
		content string
		want    []string // KEY:WORKSPACE of each key; nil: an error
		errWant string
	}{
		{"two keys", k1 + ":acme\n" + k2 + ":globex\n", []string{k1 + ":acme", k2 + ":globex"}, ""},
		{"comments, blank lines, CRLF and spaces", "# acme\n\n  " + k1 + ":acme \r\n# end\n", []string{k1 + ":acme"}, ""},
		{"no final newline", k1 + ":acme", []string{k1 + ":acme"}, ""},
		{"short key", "# first\n" + k1 + ":acme\nshort-key:globex\n", nil, "line 3"},
		{"no workspace", k1 + "\n", nil, "line 1"},
		{"only comments", "# nothing\n\n", nil, "no KEY:WORKSPACE"},
		{"the same key twice", k1 + ":acme\n" + k1 + ":globex\n", []string{k1 + ":acme", k1 + ":globex"}, ""}, // refused by the server (TestKeyringRefuses)
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			c := serveCmd{RootKeyFile: path}
			keys, err := c.rootKeys()
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) || !strings.Contains(err.Error(), "--root-key-file") {
					t.Fatalf("rootKeys() = %v, %v; want an error mentioning %q", keys, err, tc.errWant)
				}
				for _, secret := range []string{k1, "short-key"} {
					if strings.Contains(err.Error(), secret) {
						t.Fatalf("the error quotes a key: %v", err)
					}
				}
				return
			}
			if err != nil || len(keys) != len(tc.want) {
				t.Fatalf("rootKeys() = %v, %v; want %v", keys, err, tc.want)
			}
			for i, k := range keys {
				if k.Key+":"+k.Workspace != tc.want[i] {
					t.Fatalf("key %d: %s:%s, want %s", i, k.Key, k.Workspace, tc.want[i])
				}
			}
		})
	}
	if _, err := (&serveCmd{RootKeyFile: filepath.Join(t.TempDir(), "none")}).rootKeys(); err == nil {
		t.Fatal("a missing --root-key-file was accepted")
	}
}

// TestSecretsInArgv parses command lines and environments as `sluice serve`
// does and checks which secrets draw the warning: those set by a flag, not
// those from the environment, a file or a DSN or URL without a password.
func TestSecretsInArgv(t *testing.T) {
	const key = "argv-key-0123456789:acme"
	secret := strings.Repeat("c", minClusterSecretBytes)
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string // the flags warned about
	}{
		{"none", nil, nil, nil},
		{"root key as a flag", []string{"--root-key", key}, nil, []string{"root-key"}},
		{"root key from the environment", nil, map[string]string{"SLUICE_ROOT_KEYS": key}, nil},
		{"cluster secret as a flag", []string{"--cluster-secret", secret}, nil, []string{"cluster-secret"}},
		{"cluster secret from the environment", nil, map[string]string{"SLUICE_CLUSTER_SECRET": secret}, nil},
		{"DSN with a password as a flag", []string{"--mysql-dsn", "sluice:pw@tcp(db:3306)/sluice"}, nil, []string{"mysql-dsn"}},
		{"DSN without a password as a flag", []string{"--mysql-dsn", "sluice@tcp(db:3306)/sluice"}, nil, nil},
		{"DSN with a password from the environment", nil, map[string]string{"SLUICE_MYSQL_DSN": "sluice:pw@tcp(db:3306)/sluice"}, nil},
		{"read DSN with a password as a flag", []string{"--mysql-dsn", "sluice@tcp(db:3306)/sluice", "--mysql-read-dsn", "reader:pw@tcp(replica:3306)/sluice"}, nil, []string{"mysql-read-dsn"}},
		{"read DSN without a password as a flag", []string{"--mysql-read-dsn", "reader@tcp(replica:3306)/sluice"}, nil, nil},
		{"read DSN with a password from the environment", nil, map[string]string{"SLUICE_MYSQL_READ_DSN": "reader:pw@tcp(replica:3306)/sluice"}, nil},
		{"Redis URL with a password as a flag", []string{"--redis-url", "redis://:pw@redis:6379/0"}, nil, []string{"redis-url"}},
		{"Redis URL without a password as a flag", []string{"--redis-url", "redis://redis:6379/0"}, nil, nil},
		{"Redis URL with a password from the environment", nil, map[string]string{"SLUICE_REDIS_URL": "redis://u:pw@redis:6379/0"}, nil},
		{"all four as flags", []string{"--root-key", key, "--cluster-secret", secret, "--mysql-dsn", "u:p@/db", "--redis-url", "redis://:p@r:6379"}, nil,
			[]string{"root-key", "cluster-secret", "mysql-dsn", "redis-url"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var c cli
			parser, err := kong.New(&c, kong.DefaultEnvars("SLUICE"), kong.Configuration(yamlLoader))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parser.Parse(append([]string{"serve"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			c.Serve.warnSecretsInArgv(slog.New(slog.NewTextHandler(&logs, nil)))
			var got []string
			for _, f := range c.Serve.secretsInArgv() {
				got = append(got, f.name)
				if !strings.Contains(logs.String(), "flag=--"+f.name) {
					t.Errorf("no warning for --%s:\n%s", f.name, logs.String())
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("secrets in argv %v, want %v", got, tc.want)
			}
			for _, v := range append(tc.args, "pw", secret) {
				if strings.HasPrefix(v, "--") || !strings.Contains(logs.String(), v) {
					continue
				}
				t.Fatalf("the warning quotes the secret %q:\n%s", v, logs.String())
			}
		})
	}
}
