package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

func TestClusterFlagsValidate(t *testing.T) {
	secret := strings.Repeat("s", minClusterSecretBytes)
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, short, empty := file("good", secret+"\r\n"), file("short", secret[1:]+"\n"), file("empty", "\n")
	public := func(f ClusterFlags) ClusterFlags {
		f.ClusterAddr, f.ClusterAdvertise = "0.0.0.0:7946", "10.0.0.1:7946"
		return f
	}
	for _, tc := range []struct {
		name  string
		flags ClusterFlags
		http  string
		want  string // "" = valid
	}{
		{"loopback without secret", ClusterFlags{ClusterAddr: "127.0.0.1:7946", ClusterJoin: []string{"127.0.0.1:7947", "localhost:7948"}}, "127.0.0.1:7070", ""},
		{"public gossip without secret", ClusterFlags{ClusterAddr: "0.0.0.0:7946"}, "127.0.0.1:7070", "--cluster-secret"},
		{"public http without secret", ClusterFlags{ClusterAddr: "127.0.0.1:7946"}, "10.0.0.1:7070", "--cluster-secret"},
		{"dns seed without secret", ClusterFlags{ClusterAddr: "127.0.0.1:7946", ClusterJoin: []string{"sluice.svc:7946"}}, "127.0.0.1:7070", "--cluster-secret"},
		{"public with secret", ClusterFlags{ClusterAddr: "0.0.0.0:7946", ClusterAdvertise: "10.0.0.1:7946", ClusterJoin: []string{"sluice.svc:7946"}, ClusterSecret: secret}, "0.0.0.0:7070", ""},
		{"secret of 31 bytes", public(ClusterFlags{ClusterSecret: secret[1:]}), "0.0.0.0:7070", "at least 32 bytes"},
		{"secret of 1 byte on loopback", ClusterFlags{ClusterAddr: "127.0.0.1:7946", ClusterSecret: "s"}, "127.0.0.1:7070", "at least 32 bytes"},
		{"secret file", public(ClusterFlags{ClusterSecretFile: good}), "0.0.0.0:7070", ""},
		{"secret file of 31 bytes", public(ClusterFlags{ClusterSecretFile: short}), "0.0.0.0:7070", "at least 32 bytes"},
		{"empty secret file", public(ClusterFlags{ClusterSecretFile: empty}), "0.0.0.0:7070", "empty"},
		{"missing secret file", public(ClusterFlags{ClusterSecretFile: filepath.Join(dir, "none")}), "0.0.0.0:7070", "--cluster-secret-file"},
		{"secret and secret file", public(ClusterFlags{ClusterSecret: secret, ClusterSecretFile: good}), "0.0.0.0:7070", "not both"},
		{"bad gossip address", ClusterFlags{ClusterAddr: "nope"}, "127.0.0.1:7070", "--cluster-addr"},
		{"bad advertise address", ClusterFlags{ClusterAddr: "127.0.0.1:7946", ClusterAdvertise: "x"}, "127.0.0.1:7070", "--cluster-advertise"},
		{"seed without port", ClusterFlags{ClusterAddr: "127.0.0.1:7946", ClusterJoin: []string{"127.0.0.1"}}, "127.0.0.1:7070", "--cluster-join"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.flags.validate(tc.http)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "sss"):
				t.Fatalf("the error quotes the secret: %v", err)
			case tc.want == "" && tc.flags.secret != "" && tc.flags.secret != secret:
				t.Fatalf("secret in force %q, want %q", tc.flags.secret, secret)
			}
		})
	}
}

func TestClusterRPCURL(t *testing.T) {
	for _, tc := range []struct {
		flags      ClusterFlags
		http, want string
	}{
		{ClusterFlags{ClusterAddr: "127.0.0.1:7946"}, "127.0.0.1:7070", "http://127.0.0.1:7070"},
		{ClusterFlags{ClusterAddr: "0.0.0.0:7946", ClusterAdvertise: "10.0.0.5:7946"}, "[::]:7070", "http://10.0.0.5:7070"},
		{ClusterFlags{ClusterAddr: "0.0.0.0:7946"}, "0.0.0.0:7070", ""},
	} {
		c := serveCmd{ClusterFlags: tc.flags}
		got, err := c.rpcURL(tc.http)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("rpcURL(%q) with %+v = %q, %v; want %q", tc.http, tc.flags, got, err, tc.want)
		}
	}
}

// TestClusterFlagSources checks that the cluster flags come from a YAML
// file (a list for --cluster-join) and SLUICE_CLUSTER_* variables, the
// environment beating the file.
func TestClusterFlagSources(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	yaml := "origin: cluster\ncluster-addr: 127.0.0.1:8946\ncluster-join: [\"127.0.0.1:8947\", \"127.0.0.1:8948\"]\ncluster_preset: wan\ncluster-secret: from-file\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_CLUSTER_SECRET", "from-env")
	t.Setenv("SLUICE_CLUSTER_ADVERTISE", "127.0.0.1:9946")
	var c cli
	parser, err := kong.New(&c, kong.DefaultEnvars("SLUICE"), kong.Configuration(yamlLoader))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.Parse([]string{"--config", cfg, "serve"}); err != nil {
		t.Fatal(err)
	}
	got := c.Serve.ClusterFlags
	want := ClusterFlags{ClusterAddr: "127.0.0.1:8946", ClusterAdvertise: "127.0.0.1:9946", ClusterJoin: []string{"127.0.0.1:8947", "127.0.0.1:8948"}, ClusterSecret: "from-env", ClusterPreset: "wan"}
	if got.ClusterAddr != want.ClusterAddr || got.ClusterAdvertise != want.ClusterAdvertise || !slices.Equal(got.ClusterJoin, want.ClusterJoin) ||
		got.ClusterSecret != want.ClusterSecret || got.ClusterPreset != want.ClusterPreset || c.Serve.Origin != "cluster" {
		t.Errorf("flags %+v (origin %q), want %+v", got, c.Serve.Origin, want)
	}
}
