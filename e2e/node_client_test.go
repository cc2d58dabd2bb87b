package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestNodeClient runs clients/node/check.mjs, which drives the server
// through the published @unkey/api and @unkey/ratelimit packages (versions
// pinned in clients/node/package-lock.json): limit, cost, overrides,
// pagination, multiLimit, and the SDK's parsing of 400/401/404 bodies; over
// plaintext and over TLS (Node trusting the test's CA through
// NODE_EXTRA_CA_CERTS).
func TestNodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		missingTool(t, "node is not installed; the Unkey SDK compatibility check needs Node.js 18+ and npm")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missingTool(t, "npm is not installed; the Unkey SDK compatibility check needs Node.js 18+ and npm")
	}
	dir, err := filepath.Abs(filepath.Join("..", "clients", "node"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@unkey", "api")); err != nil {
		install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		install.Dir = dir
		if out, err := install.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	for _, tc := range []struct {
		name string
		pki  *pki
	}{
		{"plaintext", nil},
		{"tls", newPKI(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t, tc.pki, nil, "--root-key", "node-sdk-key-0123456789:acme")
			script := exec.CommandContext(ctx, node, "check.mjs")
			script.Dir = dir
			script.Env = append(cleanEnv(), "SLUICE_URL="+n.URL, "SLUICE_KEY=node-sdk-key-0123456789")
			if tc.pki != nil {
				script.Env = append(script.Env, "NODE_EXTRA_CA_CERTS="+tc.pki.caFile)
			}
			out, err := script.CombinedOutput()
			t.Logf("check.mjs against %s:\n%s", n.URL, out)
			if err != nil {
				t.Fatalf("the Unkey SDKs failed against sluice: %v\nserver log:\n%s", err, n.logs())
			}
		})
	}
}

// missingTool skips the test for a missing tool, or fails it when the
// environment variable CI is set: CI must run the check the README promises
// (scripts/services.sh installs Node.js and npm).
func missingTool(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set: failing rather than skipping)")
	}
	t.Skip(msg)
}
