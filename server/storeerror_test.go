package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/store"
)

// TestStoreError checks how a store error is answered: what the store
// lacks is a 404, an unreachable store or a shutdown a 503, a store bound a
// 403 with its errors list, anything else a 500.
func TestStoreError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
		typ    string
		detail string
	}{
		{"not found", fmt.Errorf("x: %w", store.ErrNotFound), http.StatusNotFound, TypeNamespaceNotFound, "no namespace"},
		{"closed", store.ErrClosed, http.StatusServiceUnavailable, TypeUnavailable, "shutting down"},
		{"unreachable", fmt.Errorf("store/redis: set override: %w: dial tcp: connection refused", store.ErrUnavailable), http.StatusServiceUnavailable, TypeUnavailable, "unreachable"},
		{"bound", fmt.Errorf("store/redis: set override: %w: the namespace has 10 overrides", store.ErrLimitReached), http.StatusForbidden, TypeStoreLimit, "10 overrides"},
		{"other", errors.New("boom"), http.StatusInternalServerError, TypeUnexpected, "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := storeError(tc.err, namespaceNotFound("api"))
			if e.Status != tc.status || e.Type != tc.typ || !strings.Contains(e.Detail, tc.detail) {
				t.Fatalf("got %d %s %q", e.Status, e.Type, e.Detail)
			}
			if e.Status == http.StatusForbidden && len(e.Errors) == 0 {
				t.Fatal("a 403 without an errors list")
			}
		})
	}
}
