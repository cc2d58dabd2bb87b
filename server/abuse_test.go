package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// hostileKey is the root key of the abuse tests.
const hostileKey = "hostile-tenant-key-0001"

// unknownFields returns a limit body padded with n unknown members whose
// names are name(i).
func unknownFields(n int, name func(i int) string) string {
	var b strings.Builder
	b.WriteString(`{"namespace":"n","identifier":"i","limit":1,"duration":60000`)
	for i := range n {
		b.WriteString(`,"` + name(i) + `":1`)
	}
	b.WriteString("}")
	return b.String()
}

// nested returns a value nested depth times in arrays.
func nested(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

// TestHostileBodiesBounded sends bodies built to make errors large (many
// unknown fields, huge or unprintable names, deep nesting, many elements)
// and oversized methods, paths and headers to every 4xx path: each answer
// has Unkey's error body, at most MaxErrorBodyBytes long, at most
// MaxFieldErrors errors, and repeats at most MaxEchoBytes of any name.
func TestHostileBodiesBounded(t *testing.T) {
	s := newServerWith(t, Config{RootKeys: []RootKey{{Key: hostileKey, Workspace: "acme"}}})
	h := s.Handler()
	huge := strings.Repeat("n", 900<<10)
	controls := strings.Repeat(`\u0001`, 200)
	check := `{"namespace":"n","identifier":"i","limit":1,"duration":60000}`
	for _, tc := range []struct {
		name, method, path, auth, ct, body string
		code                               int
		errors                             int // want exactly this many errors listed; -1: any
		echo                               string
	}{
		{"170k unknown fields", "POST", "/v2/ratelimit.limit", hostileKey, "application/json",
			unknownFields(170_000, func(int) string { return "x" }), 400, MaxFieldErrors, ""},
		{"one 900 KiB field name", "POST", "/v2/ratelimit.limit", hostileKey, "application/json",
			unknownFields(1, func(int) string { return huge }), 400, 1, "body." + huge[:MaxEchoBytes-3] + "…"},
		{"escaped 900 KiB field name", "POST", "/v2/ratelimit.setOverride", hostileKey, "application/json",
			`{"` + strings.Repeat(`\u006e`, 150_000) + `":1}`, 400, 5, "body." + strings.Repeat("n", MaxEchoBytes-3) + "…"},
		{"names of control characters", "POST", "/v2/ratelimit.limit", hostileKey, "application/json",
			unknownFields(500, func(i int) string { return controls + strconv.Itoa(i) }), 400, MaxFieldErrors, "body." + strings.Repeat("\uFFFD", 20) + "…"},
		{"many duplicate fields", "POST", "/v2/ratelimit.limit", hostileKey, "application/json",
			unknownFields(100_000, func(int) string { return "limit" }), 400, MaxFieldErrors, ""},
		{"nesting beyond the max depth", "POST", "/v2/ratelimit.limit", hostileKey, "application/json",
			`{"x":` + nested(maxDepth+10) + `}`, 400, 2, "exceeded max depth"},
		{"deep nesting within the max depth", "POST", "/v2/ratelimit.limit", hostileKey, "application/json",
			`{"x":` + nested(maxDepth-10) + `}`, 400, 5, ""},
		{"100k empty array elements", "POST", "/v2/ratelimit.multiLimit", hostileKey, "application/json",
			"[" + strings.TrimSuffix(strings.Repeat("{},", 100_000), ",") + "]", 400, MaxFieldErrors, ""},
		{"100 elements of 300 unknown fields", "POST", "/v2/ratelimit.multiLimit", hostileKey, "application/json",
			"[" + strings.TrimSuffix(strings.Repeat(unknownFields(300, func(i int) string { return "x" + strconv.Itoa(i) })+",", 100), ",") + "]", 400, MaxFieldErrors, ""},
		{"200k array elements in an unknown field", "POST", "/v2/ratelimit.listOverrides", hostileKey, "application/json",
			`{"namespace":"n","x":[` + strings.TrimSuffix(strings.Repeat("1,", 200_000), ",") + `]}`, 400, 1, ""},
		{"syntax error after 50k errors", "POST", "/v2/ratelimit.getOverride", hostileKey, "application/json",
			strings.TrimSuffix(unknownFields(50_000, func(i int) string { return "z" + strconv.Itoa(i) }), "}") + `,`, 400, MaxFieldErrors, ""},
		{"404 with a 60 KiB path", "POST", "/" + strings.Repeat("p", 60<<10), hostileKey, "application/json", check, 404, 0, "/" + strings.Repeat("p", MaxEchoBytes-4) + "…"},
		{"405 with a long method", strings.Repeat("M", 10<<10), "/v2/ratelimit.limit", hostileKey, "application/json", check, 405, 0, strings.Repeat("M", MaxEchoBytes-3) + "…"},
		{"401 with a 60 KiB key", "POST", "/v2/ratelimit.limit", strings.Repeat("k", 60<<10), "application/json", check, 401, 0, ""},
		{"415 with a 60 KiB media type", "POST", "/v2/ratelimit.limit", hostileKey, "application/" + strings.Repeat("j", 60<<10), check, 415, 1, ""},
		{"415 with a 60 KiB charset", "POST", "/v2/ratelimit.limit", hostileKey, "application/json; charset=" + strings.Repeat("c", 60<<10), check, 415, 1, strings.Repeat("c", MaxEchoBytes-3) + "…"},
		{"413", "POST", "/v2/ratelimit.limit", hostileKey, "application/json", `{"namespace":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`, 413, 1, ""},
		{"404 namespace of 512 bytes", "POST", "/v2/ratelimit.getOverride", hostileKey, "application/json", `{"namespace":"` + strings.Repeat("q", MaxNameBytes) + `","identifier":"i"}`, 404, 0, strings.Repeat("q", MaxEchoBytes-3) + "…"},
		{"identifiers of 600 KiB", "POST", "/v2/ratelimit.limit", hostileKey, "application/json", `{"namespace":"` + strings.Repeat("a", 300<<10) + `","identifier":"` + strings.Repeat("b", 300<<10) + `","limit":1,"duration":60000}`, 400, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, h, tc.method, tc.path, "Bearer "+tc.auth, tc.ct, tc.body)
			if r.code != tc.code {
				t.Fatalf("status %d, want %d: %.300s", r.code, tc.code, r.raw)
			}
			if len(r.raw) > MaxErrorBodyBytes {
				t.Fatalf("a %d-byte error body, over %d bytes", len(r.raw), MaxErrorBodyBytes)
			}
			e, _ := r.body["error"].(map[string]any)
			if r.requestID() == "" || e == nil || e["status"] != float64(tc.code) {
				t.Fatalf("not Unkey's error body: %.300s", r.raw)
			}
			if n := len(r.errorLocations()); tc.errors >= 0 && n != tc.errors {
				t.Fatalf("%d errors listed, want %d: %.500s", n, tc.errors, r.raw)
			}
			if tc.echo != "" && !strings.Contains(r.raw, tc.echo) {
				t.Fatalf("the body does not repeat %q: %.500s", tc.echo, r.raw)
			}
			if tc.errors == MaxFieldErrors && !strings.Contains(e["detail"].(string), "the first 20 errors are listed") {
				t.Fatalf("the detail does not say that errors were left out: %q", e["detail"])
			}
		})
	}
}

// TestDecodeKeepsFewErrors checks that the decoder keeps MaxFieldErrors+1
// errors at most, however many the body holds.
func TestDecodeKeepsFewErrors(t *testing.T) {
	_, es := decodeLimit([]byte(unknownFields(50_000, func(i int) string { return "u" + strconv.Itoa(i) })))
	if len(es) != MaxFieldErrors+1 || es[0].Location != "body.u0" {
		t.Fatalf("%d errors, the first %v; want %d, the first at body.u0", len(es), es[0], MaxFieldErrors+1)
	}
}

func TestEcho(t *testing.T) {
	long := strings.Repeat("é", 40) // 80 bytes
	for _, tc := range []struct {
		name, in, want string
	}{
		{"short", "body.x", "body.x"},
		{"64 bytes kept", strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{"65 bytes cut", strings.Repeat("a", 65), strings.Repeat("a", 61) + "…"},
		{"cut at a character boundary", long, strings.Repeat("é", 30) + "…"},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb"},
		{"control characters", "a\x00\nb", "a\uFFFD\uFFFDb"},
		{"line separator", "a\u2028b", "a\uFFFDb"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := echo(tc.in)
			if got != tc.want || len(got) > MaxEchoBytes || !utf8.ValidString(got) {
				t.Fatalf("echo(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestAppendErrorBounded builds error bodies whose strings exceed every
// bound: the body stays within MaxErrorBodyBytes, is valid JSON, and keeps
// as many whole entries of its errors list as fit.
func TestAppendErrorBounded(t *testing.T) {
	big := strings.Repeat("\x01", 10<<10)
	many := make([]FieldError, 200)
	for i := range many {
		many[i] = FieldError{Location: "body.f" + strconv.Itoa(i), Message: "is not a known field"}
	}
	for _, tc := range []struct {
		name     string
		e        *apiError
		minItems int
	}{
		{"huge detail", &apiError{Title: "Bad Request", Detail: big, Status: 400, Type: TypeInvalidInput, Errors: []FieldError{{Location: "body", Message: "m"}}}, 1},
		{"huge entries", &apiError{Title: "Bad Request", Detail: "d", Status: 400, Type: TypeInvalidInput, Errors: []FieldError{{Location: big, Message: big, Fix: big}, {Location: big, Message: big, Fix: big}, {Location: big, Message: big, Fix: big}}}, 1},
		{"200 entries", &apiError{Title: "Bad Request", Detail: "d", Status: 400, Type: TypeInvalidInput, Errors: many}, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := appendError(nil, "req_1", tc.e)
			if len(b) > MaxErrorBodyBytes {
				t.Fatalf("%d bytes, over %d", len(b), MaxErrorBodyBytes)
			}
			var got struct {
				Error struct {
					Detail string       `json:"detail"`
					Errors []FieldError `json:"errors"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("not JSON: %v: %.300s", err, b)
			}
			if len(got.Error.Errors) < tc.minItems {
				t.Fatalf("%d errors kept, want at least %d", len(got.Error.Errors), tc.minItems)
			}
			if len(tc.e.Detail) > maxDetailJSON && !strings.HasSuffix(got.Error.Detail, "…") {
				t.Fatalf("a cut detail without an ellipsis: %.100q", got.Error.Detail)
			}
		})
	}
}

// TestAppendStringMax checks that a cut string's JSON fits its bound and
// that a string within it is written as appendString writes it.
func TestAppendStringMax(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		limit    int
	}{
		{"fits", "plain", 16},
		{"ASCII cut", strings.Repeat("a", 100), 16},
		{"escapes cut", strings.Repeat("\x01\"", 50), 20},
		{"multibyte cut", strings.Repeat("😀", 50), 21},
		{"invalid UTF-8 cut", strings.Repeat("\xff", 50), 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := appendStringMax(nil, tc.in, tc.limit)
			var back string
			if err := json.Unmarshal(got, &back); err != nil || len(got) > tc.limit {
				t.Fatalf("%s: %d bytes (limit %d), %v", got, len(got), tc.limit, err)
			}
			if full := appendString(nil, tc.in); len(full) <= tc.limit && !bytes.Equal(got, full) {
				t.Fatalf("%s, want %s", got, full)
			}
			if len(appendString(nil, tc.in)) > tc.limit && (!strings.HasSuffix(back, "…") || len(got) < tc.limit-8) {
				t.Fatalf("cut to %s", got)
			}
		})
	}
}

// failingLimiter fails every decision with err.
type failingLimiter struct{ err error }

func (f failingLimiter) Ratelimit(context.Context, sluice.Request) (sluice.Response, error) {
	return sluice.Response{}, f.err
}

func (f failingLimiter) RatelimitMany(context.Context, []sluice.Request) ([]sluice.Response, error) {
	return nil, f.err
}

func (f failingLimiter) Report(context.Context, sluice.Request) (sluice.Response, error) {
	return sluice.Response{}, f.err
}

func (f failingLimiter) ReportMany(context.Context, []sluice.Request) ([]sluice.Response, error) {
	return nil, f.err
}

// failingStore is a memStore whose override reads and writes fail with err.
type failingStore struct {
	*memStore
	err error
}

func (f failingStore) SetOverride(context.Context, store.Override) (store.Override, error) {
	return store.Override{}, f.err
}

func (f failingStore) Override(context.Context, string, string, string) (store.Override, error) {
	return store.Override{}, f.err
}

func (f failingStore) ListOverrides(context.Context, string, string, string, int) ([]store.Override, error) {
	return nil, f.err
}

// TestServerErrorsAreGeneric makes the limiter and the store fail with
// errors that name hosts, users and queries: the 5xx body says none of it
// and carries the request id, under which the log holds the cause.
func TestServerErrorsAreGeneric(t *testing.T) {
	const secret = "10.20.30.40:3306"
	revealing := errors.New("dial tcp " + secret + ": Error 1045 (28000): Access denied for user 'sluice'@'" + secret + "' (using password: YES)")
	body := `{"namespace":"n","identifier":"i","limit":1,"duration":60000}`
	override := `{"namespace":"n","identifier":"i","limit":1,"duration":60000}`
	for _, tc := range []struct {
		name     string
		limiter  error
		store    error
		endpoint string
		body     string
		code     int
	}{
		{"limiter failure", revealing, nil, "limit", body, 500},
		{"limiter failure in multiLimit", revealing, nil, "multiLimit", "[" + body + "]", 500},
		{"limiter cut", fmt.Errorf("origin "+secret+": %w", context.DeadlineExceeded), nil, "limit", body, 503},
		{"limiter failure in report", revealing, nil, "report", body, 500},
		{"limiter failure in multiReport", revealing, nil, "multiReport", "[" + body + "]", 500},
		{"limiter cut in report", fmt.Errorf("origin "+secret+": %w", sluice.ErrClosed), nil, "report", body, 503},
		{"store failure on write", nil, revealing, "setOverride", override, 500},
		{"store failure on read", nil, revealing, "getOverride", `{"namespace":"n","identifier":"i"}`, 500},
		{"store unreachable", nil, fmt.Errorf("store/mysql: %w: %w", store.ErrUnavailable, revealing), "listOverrides", `{"namespace":"n"}`, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			cfg := Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
			s := newServerOver(t, failingStore{newMemStore(), tc.store}, cfg)
			if tc.limiter != nil {
				s.cfg.Limiter = failingLimiter{tc.limiter}
			}
			h := s.Handler()
			if tc.store != nil { // the namespace exists, so the failing call is the override's
				if r := do(t, h, "POST", "/v2/ratelimit.limit", "Bearer k", "application/json", body); r.code != 200 {
					t.Fatalf("creating the namespace: %d %s", r.code, r.raw)
				}
			}
			r := do(t, h, "POST", "/v2/ratelimit."+tc.endpoint, "Bearer k", "application/json", tc.body)
			if r.code != tc.code {
				t.Fatalf("status %d, want %d: %s", r.code, tc.code, r.raw)
			}
			for _, leak := range []string{secret, "Access denied", "dial tcp", "deadline"} {
				if strings.Contains(r.raw, leak) {
					t.Fatalf("the body reveals %q: %s", leak, r.raw)
				}
			}
			id := r.requestID()
			if id == "" || !strings.Contains(r.raw, "logged with this request's id") && tc.code == 500 {
				t.Fatalf("no request id or no pointer to the log: %s", r.raw)
			}
			if l := logs.String(); !strings.Contains(l, id) || !strings.Contains(l, secret) {
				t.Fatalf("the log lacks the request id %s or the cause:\n%s", id, l)
			}
		})
	}
}

// TestContentTypeCharset checks that a body declared in a charset other
// than UTF-8 is refused with a 415 and Unkey's error body, not misread.
func TestContentTypeCharset(t *testing.T) {
	h := newTestServer(t).Handler()
	body := `{"namespace":"n","identifier":"i","limit":1,"duration":60000}`
	for _, tc := range []struct {
		name, ct string
		code     int
	}{
		{"no charset", "application/json", 200},
		{"utf-8", "application/json; charset=utf-8", 200},
		{"UTF-8", "application/json; charset=UTF-8", 200},
		{"utf8", "application/json;charset=utf8", 200},
		{"quoted utf-8", `application/json; charset="utf-8"`, 200},
		{"utf-16", "application/json; charset=utf-16", 415},
		{"UTF-16LE", "application/json; charset=UTF-16LE", 415},
		{"latin-1", "application/json; charset=iso-8859-1", 415},
		{"empty charset", "application/json; charset=", 415},
		{"text/plain utf-8", "text/plain; charset=utf-8", 415},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, h, "POST", "/v2/ratelimit.limit", "Bearer k", tc.ct, body)
			if r.code != tc.code {
				t.Fatalf("status %d, want %d: %s", r.code, tc.code, r.raw)
			}
			if tc.code == 415 {
				e, _ := r.body["error"].(map[string]any)
				if e["type"] != TypeUnsupportedMedia || len(r.errorLocations()) != 1 || r.requestID() == "" {
					t.Fatalf("not Unkey's error body: %s", r.raw)
				}
			}
		})
	}
}
