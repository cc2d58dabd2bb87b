package server

import (
	"net/http"
)

// Problem type URIs sent in error bodies. Where Unkey documents a type for the
// same problem, Sluice sends Unkey's URI so that clients branching on it keep
// working.
const (
	TypeInvalidInput      = "https://unkey.com/docs/errors/unkey/application/invalid_input"
	TypeUnauthorized      = "https://unkey.com/docs/errors/unkey/authentication/key_not_found"
	TypeMissingAuth       = "https://unkey.com/docs/errors/unkey/authentication/missing"
	TypeNamespaceNotFound = "https://unkey.com/docs/errors/unkey/data/ratelimit_namespace_not_found"
	TypeOverrideNotFound  = "https://unkey.com/docs/errors/unkey/data/ratelimit_override_not_found"
	TypeRouteNotFound     = "https://unkey.com/docs/errors/user/not_found/route_not_found"
	TypeMethodNotAllowed  = "https://unkey.com/docs/errors/user/bad_request/method_not_allowed"
	TypeBodyTooLarge      = "https://unkey.com/docs/errors/user/bad_request/request_body_too_large"
	TypeUnsupportedMedia  = "https://unkey.com/docs/errors/user/bad_request/unsupported_media_type"
	TypeUnexpected        = "https://unkey.com/docs/errors/unkey/application/unexpected_error"
	TypeUnavailable       = "https://unkey.com/docs/errors/unkey/application/service_unavailable"
)

// FieldError is one entry of a 400 body's error.errors list.
type FieldError struct {
	// Location is a JSON path into the request, e.g. "body.limit" or
	// "body[2].identifier".
	Location string `json:"location"`
	// Message says which rule the value broke.
	Message string `json:"message"`
	// Fix, when present, says how to satisfy the rule.
	Fix string `json:"fix,omitempty"`
}

// apiError is an error response: status plus Unkey's error object.
type apiError struct {
	Title  string       `json:"title"`
	Detail string       `json:"detail"`
	Status int          `json:"status"`
	Type   string       `json:"type"`
	Errors []FieldError `json:"errors,omitempty"`
}

func newError(status int, typ, detail string) *apiError {
	return &apiError{Title: http.StatusText(status), Detail: detail, Status: status, Type: typ}
}

// badRequest builds a 400 whose errors list is errs (never empty: the Unkey
// SDK rejects a 400 without it).
func badRequest(errs []FieldError) *apiError {
	e := newError(http.StatusBadRequest, TypeInvalidInput, "The request is invalid: "+errs[0].Location+": "+errs[0].Message)
	if len(errs) > 1 {
		e.Detail += " (and more, see errors)"
	}
	e.Errors = errs
	return e
}

func unexpected() *apiError {
	return newError(http.StatusInternalServerError, TypeUnexpected, "The server failed to handle the request; the error is logged with this request's id.")
}
