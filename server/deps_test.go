package server

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoBackend checks that a program embedding server does not link
// the backends it does not need: go-redis, Envoy's protobufs, SQL drivers.
// Their metrics and stores are wired by cmd/sluice.
func TestLinksNoBackend(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range []string{"github.com/redis/go-redis", "github.com/envoyproxy", "modernc.org/sqlite", "github.com/go-sql-driver/mysql"} {
		if strings.Contains(string(out), pkg) {
			t.Errorf("server links %s", pkg)
		}
	}
}
