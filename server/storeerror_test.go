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
// 403 with its errors list, anything else a 500. A 5xx keeps the store's
// error as its cause, for the log, and never in its detail.
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
		{"unreachable", fmt.Errorf("store/redis: set override: %w: dial tcp 10.0.0.7:6379: connection refused", store.ErrUnavailable), http.StatusServiceUnavailable, TypeUnavailable, "unreachable"},
		{"bound", fmt.Errorf("store/redis: set override: %w: the namespace has 10 overrides", store.ErrLimitReached), http.StatusForbidden, TypeStoreLimit, "10 overrides"},
		{"overrides bound", fmt.Errorf("store/redis: set override: %w", &store.LimitError{Bound: store.BoundOverrides, Max: 10}), http.StatusForbidden, TypeStoreLimit, "This namespace has 10 overrides, as many as it may have (--max-overrides)"},
		{"namespaces bound", fmt.Errorf("store/redis: ensure namespace: %w", &store.LimitError{Bound: store.BoundNamespaces, Max: 7}), http.StatusForbidden, TypeStoreLimit, "This workspace has 7 namespaces"},
		{"other", errors.New("store/mysql: Error 1146: Table 'sluice.overrides' doesn't exist"), http.StatusInternalServerError, TypeUnexpected, "logged with this request's id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := storeError(tc.err, namespaceNotFound("api"))
			if e.Status != tc.status || e.Type != tc.typ || !strings.Contains(e.Detail, tc.detail) {
				t.Fatalf("got %d %s %q", e.Status, e.Type, e.Detail)
			}
			if e.Status == http.StatusForbidden && len(e.Errors) == 0 {
				t.Fatal("a 403 without an errors list")
			}
			if e.Status >= 500 && (!errors.Is(e.cause, tc.err) || strings.Contains(e.Detail, "10.0.0.7") || strings.Contains(e.Detail, "Table")) {
				t.Fatalf("a 5xx with cause %v and detail %q; want the cause kept and the detail generic", e.cause, e.Detail)
			}
		})
	}
}
