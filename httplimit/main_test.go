package httplimit_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/servetest"
)

// rootKey is the root key of the shared server, for workspace "acme".
const rootKey = "rk-httplimit-test-0123456789"

var (
	// binary is the sluice executable built by TestMain.
	binary string
	// shared is one `sluice serve` for the tests of the Remote limiter
	// (each on namespaces of its own) and the examples.
	shared *servetest.Server
)

func TestMain(m *testing.M) {
	servetest.Main(m, []string{"--root-key", rootKey + ":acme"}, func(bin string, s *servetest.Server) {
		binary, shared = bin, s
		sluiceURL, sluiceRootKey = s.URL, rootKey
	})
}
