package client_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/server"
)

func TestTypesAreTheServers(t *testing.T) {
	for _, c := range []struct{ client, server string }{
		{client.TypeInvalidInput, server.TypeInvalidInput},
		{client.TypeKeyNotFound, server.TypeUnauthorized},
		{client.TypeMissingAuth, server.TypeMissingAuth},
		{client.TypeNamespaceNotFound, server.TypeNamespaceNotFound},
		{client.TypeOverrideNotFound, server.TypeOverrideNotFound},
		{client.TypeRouteNotFound, server.TypeRouteNotFound},
		{client.TypeStoreLimit, server.TypeStoreLimit},
		{client.TypeUnexpected, server.TypeUnexpected},
		{client.TypeUnavailable, server.TypeUnavailable},
	} {
		if c.client != c.server {
			t.Errorf("client type %q, server type %q", c.client, c.server)
		}
	}
}

func TestAPIErrorMessageAndSentinels(t *testing.T) {
	tests := []struct {
		name             string
		err              *client.APIError
		want             string
		notFound, unauth bool
	}{
		{"full", &client.APIError{Op: "ratelimit.getOverride", Status: 404, Title: "Not Found", Detail: "No override.", Type: client.TypeOverrideNotFound, RequestID: "req_1"},
			"client: ratelimit.getOverride: 404 Not Found: No override. (type " + client.TypeOverrideNotFound + ", request req_1)", true, false},
		{"a proxy's page", &client.APIError{Op: "ratelimit.limit", Status: 502, Detail: "<html>"},
			"client: ratelimit.limit: 502 Bad Gateway: <html>", false, false},
		{"unauthorized", &client.APIError{Op: "ratelimit.limit", Status: 401, Type: client.TypeMissingAuth, RequestID: "req_2"},
			"client: ratelimit.limit: 401 Unauthorized (type " + client.TypeMissingAuth + ", request req_2)", false, true},
		{"unknown route is not ErrNotFound", &client.APIError{Op: "ratelimit.limit", Status: 404, Type: client.TypeRouteNotFound},
			"client: ratelimit.limit: 404 Not Found (type " + client.TypeRouteNotFound + ")", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fmt.Errorf("wrapped: %w", tt.err)
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
			if errors.Is(err, client.ErrNotFound) != tt.notFound || errors.Is(err, client.ErrUnauthorized) != tt.unauth {
				t.Errorf("errors.Is: not found %v, unauthorized %v; want %v, %v",
					errors.Is(err, client.ErrNotFound), errors.Is(err, client.ErrUnauthorized), tt.notFound, tt.unauth)
			}
		})
	}
}
