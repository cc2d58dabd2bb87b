package client

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// Problem types the API sends in [APIError.Type]. Where Unkey documents a
// type for the same problem, Sluice sends Unkey's URI, so code branching on
// them works against both.
const (
	TypeInvalidInput      = "https://unkey.com/docs/errors/unkey/application/invalid_input"
	TypeKeyNotFound       = "https://unkey.com/docs/errors/unkey/authentication/key_not_found"
	TypeMissingAuth       = "https://unkey.com/docs/errors/unkey/authentication/missing"
	TypeNamespaceNotFound = "https://unkey.com/docs/errors/unkey/data/ratelimit_namespace_not_found"
	TypeOverrideNotFound  = "https://unkey.com/docs/errors/unkey/data/ratelimit_override_not_found"
	TypeRouteNotFound     = "https://unkey.com/docs/errors/user/not_found/route_not_found"
	TypeStoreLimit        = "urn:sluice:error:store_limit_reached"
	TypeUnexpected        = "https://unkey.com/docs/errors/unkey/application/unexpected_error"
	TypeUnavailable       = "https://unkey.com/docs/errors/unkey/application/service_unavailable"
)

var (
	// ErrNotFound matches, with errors.Is, an [*APIError] saying that the
	// namespace or the override does not exist in the caller's workspace
	// (404 with [TypeNamespaceNotFound] or [TypeOverrideNotFound]).
	ErrNotFound = errors.New("client: not found")
	// ErrUnauthorized matches, with errors.Is, an [*APIError] with status
	// 401: the root key is missing or unknown to the server.
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrInvalidConfig is returned, wrapped with the reason, by [New] for a
	// base URL, root key or option it cannot use.
	ErrInvalidConfig = errors.New("client: invalid config")
)

// FieldError is one entry of [APIError.Errors]: a value of the request that
// broke a rule.
type FieldError struct {
	// Location is a JSON path into the request, e.g. "body.limit".
	Location string `json:"location"`
	// Message says which rule the value broke.
	Message string `json:"message"`
	// Fix, when present, says how to satisfy the rule.
	Fix string `json:"fix,omitempty"`
}

// APIError is an answer of the API other than 2xx: the server (or a proxy
// in front of it) refused or failed the call. Get it with errors.As.
type APIError struct {
	// Op is the endpoint called, e.g. "ratelimit.limit".
	Op string
	// Status is the HTTP status code.
	Status int
	// Type is the problem type URI (one of the Type constants for Sluice's
	// own errors). It is empty when the body was not the API's error
	// object, e.g. a proxy's 502 page.
	Type string
	// Title is the status's short description.
	Title string
	// Detail explains this occurrence; for a body that was not the API's
	// JSON, its first bytes.
	Detail string
	// RequestID is the server's id of the request (meta.requestId, or the
	// X-Request-Id header); quote it when asking the operator.
	RequestID string
	// Errors lists the invalid values of a 400.
	Errors []FieldError
}

// Error describes the error on one line: endpoint, status, detail, type
// and request id.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("client: ")
	b.WriteString(e.Op)
	b.WriteString(": ")
	b.WriteString(strconv.Itoa(e.Status))
	b.WriteByte(' ')
	if e.Title != "" {
		b.WriteString(e.Title)
	} else {
		b.WriteString(http.StatusText(e.Status))
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Type != "" || e.RequestID != "" {
		b.WriteString(" (")
		if e.Type != "" {
			b.WriteString("type ")
			b.WriteString(e.Type)
			if e.RequestID != "" {
				b.WriteString(", ")
			}
		}
		if e.RequestID != "" {
			b.WriteString("request ")
			b.WriteString(e.RequestID)
		}
		b.WriteByte(')')
	}
	return b.String()
}

// Is reports whether e is an instance of target: [ErrNotFound] for a
// missing namespace or override, [ErrUnauthorized] for a 401.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound && (e.Type == TypeNamespaceNotFound || e.Type == TypeOverrideNotFound)
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	}
	return false
}
