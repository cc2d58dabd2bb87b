package server

import (
	"net/http"
	"unicode"
	"unicode/utf8"
)

// Bounds of every error body, whatever the request: a hostile body of many
// unknown fields or huge names gets an answer of a few KiB, not one that
// grows with its input.
const (
	// MaxFieldErrors bounds the errors list of a 400; the detail says when
	// more errors were found than are listed.
	MaxFieldErrors = 20
	// MaxEchoBytes bounds, in bytes of UTF-8, what an error repeats of the
	// request (a field name, a path, a method, a namespace or identifier);
	// longer text is cut and ends with "…".
	MaxEchoBytes = 64
	// MaxErrorBodyBytes bounds the body of every error response.
	MaxErrorBodyBytes = 8 << 10
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

// apiError is an error response: status plus Unkey's error object. cause,
// the error behind a 5xx, is logged with the request id and never sent.
type apiError struct {
	Title  string       `json:"title"`
	Detail string       `json:"detail"`
	Status int          `json:"status"`
	Type   string       `json:"type"`
	Errors []FieldError `json:"errors,omitempty"`
	cause  error
}

func newError(status int, typ, detail string) *apiError {
	return &apiError{Title: http.StatusText(status), Detail: detail, Status: status, Type: typ}
}

// badRequest builds a 400 whose errors list is errs (never empty: the Unkey
// SDK rejects a 400 without it), cut to its first MaxFieldErrors.
func badRequest(errs []FieldError) *apiError {
	e := newError(http.StatusBadRequest, TypeInvalidInput, "The request is invalid: "+errs[0].Location+": "+errs[0].Message)
	switch {
	case len(errs) > MaxFieldErrors:
		errs = errs[:MaxFieldErrors]
		e.Detail += " (and more: the first 20 errors are listed)"
	case len(errs) > 1:
		e.Detail += " (and more, see errors)"
	}
	e.Errors = errs
	return e
}

// internalError is a 500 whose body says only that the error is logged
// with the request's id: cause, which may name hosts, files or queries, is
// logged and never sent.
func internalError(cause error) *apiError {
	e := newError(http.StatusInternalServerError, TypeUnexpected, "The server failed to handle the request; the error is logged with this request's id.")
	e.cause = cause
	return e
}

// unavailable is a 503 with a detail written for the client; cause, if
// any, is logged and never sent.
func unavailable(detail string, cause error) *apiError {
	e := newError(http.StatusServiceUnavailable, TypeUnavailable, detail)
	e.cause = cause
	return e
}

// echo returns s as an error may repeat it: invalid UTF-8 and non-printable
// characters replaced by U+FFFD, and at most MaxEchoBytes bytes long: longer
// text is cut at a character boundary and ends with "…".
func echo(s string) string {
	clean := len(s) <= MaxEchoBytes
	for i := 0; clean && i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		clean = (r != utf8.RuneError || size > 1) && unicode.IsPrint(r)
		i += size
	}
	if clean {
		return s
	}
	const ellipsis = "…"
	b := make([]byte, 0, MaxEchoBytes)
	cut := 0              // the length of b that leaves room for the ellipsis
	for _, r := range s { // an invalid byte is a utf8.RuneError of width 1
		if !unicode.IsPrint(r) {
			r = utf8.RuneError
		}
		if len(b)+utf8.RuneLen(r) > MaxEchoBytes {
			return string(append(b[:cut], ellipsis...))
		}
		b = utf8.AppendRune(b, r)
		if len(b) <= MaxEchoBytes-len(ellipsis) {
			cut = len(b)
		}
	}
	return string(b)
}
