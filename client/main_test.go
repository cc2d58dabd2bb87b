package client_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/servetest"
)

// rootKey is the root key of the shared server, for workspace "acme".
const rootKey = "rk-client-test-0123456789"

var (
	// binary is the sluice executable built by TestMain.
	binary string
	// shared is one `sluice serve` for the tests that need no particular
	// flags (each uses namespaces of its own) and for the examples.
	shared *servetest.Server
)

func TestMain(m *testing.M) {
	servetest.Main(m, []string{"--root-key", rootKey + ":acme"}, func(bin string, s *servetest.Server) {
		binary, shared = bin, s
		sluiceURL, sluiceRootKey = s.URL, rootKey
	})
}

// newClient returns a client of url with the shared server's root key whose
// idle connections are closed when the test ends.
func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, rootKey, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// namespace is a namespace of the test's own.
func namespace(t *testing.T) string {
	return strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
}
