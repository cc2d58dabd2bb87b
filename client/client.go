package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultTimeout bounds a call, retries included, whose context has no
// earlier deadline; [WithTimeout] changes it.
const DefaultTimeout = 10 * time.Second

// maxResponseBytes bounds the body of an answer; a longer one is an error.
const maxResponseBytes = 8 << 20

const userAgent = "sluice-go-client"

// Client calls one Sluice server (or a load balancer in front of several).
// It is safe for concurrent use; create one and share it, so that its
// connections are reused.
type Client struct {
	base     string // scheme://host[/prefix], no trailing slash
	auth     string // "Bearer <root key>"
	hc       *http.Client
	own      *http.Transport // the default transport, nil with WithHTTPClient
	retry    RetryPolicy
	timeout  time.Duration
	pageSize int
}

// settings collects the options of [New].
type settings struct {
	hc       *http.Client
	tls      *tls.Config
	retry    RetryPolicy
	timeout  time.Duration
	pageSize int
}

// Option configures a [Client] in [New].
type Option func(*settings)

// WithHTTPClient makes the client send its requests with hc instead of its
// own tuned transport. hc's Timeout, if set, bounds each attempt.
func WithHTTPClient(hc *http.Client) Option { return func(s *settings) { s.hc = hc } }

// WithTLSConfig sets the TLS configuration of the client's own transport
// (for example RootCAs for a private CA, or Certificates for mTLS); HTTP/2
// is still negotiated. It cannot be combined with [WithHTTPClient].
func WithTLSConfig(c *tls.Config) Option { return func(s *settings) { s.tls = c.Clone() } }

// WithRetry replaces the [DefaultRetryPolicy]; see the package
// documentation for which calls are retried.
func WithRetry(p RetryPolicy) Option { return func(s *settings) { s.retry = p } }

// WithTimeout bounds every call, retries included, to d when its context
// has no earlier deadline ([DefaultTimeout] otherwise). 0 leaves calls
// bounded by their context alone.
func WithTimeout(d time.Duration) Option { return func(s *settings) { s.timeout = d } }

// WithPageSize sets how many overrides [Client.ListOverrides] asks for per
// page, 1 to 100 (default 100).
func WithPageSize(n int) Option { return func(s *settings) { s.pageSize = n } }

// New returns a client of the server at baseURL (http:// or https://, with
// an optional path prefix) that authenticates with rootKey. It makes no
// call; an error wraps [ErrInvalidConfig].
func New(baseURL, rootKey string, opts ...Option) (*Client, error) {
	s := settings{retry: DefaultRetryPolicy, timeout: DefaultTimeout, pageSize: maxPageSize}
	for _, o := range opts {
		o(&s)
	}
	base, err := parseBase(baseURL)
	if err != nil {
		return nil, err
	}
	if err := checkKey(rootKey); err != nil {
		return nil, err
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	c := &Client{base: base, auth: "Bearer " + rootKey, hc: s.hc, retry: s.retry, timeout: s.timeout, pageSize: s.pageSize}
	if c.hc == nil {
		c.own = newTransport(s.tls)
		c.hc = &http.Client{Transport: c.own}
	}
	return c, nil
}

func (s *settings) validate() error {
	switch {
	case s.hc != nil && s.tls != nil:
		return fmt.Errorf("%w: WithTLSConfig configures the client's own transport, which WithHTTPClient replaces", ErrInvalidConfig)
	case s.timeout < 0:
		return fmt.Errorf("%w: timeout %v is negative", ErrInvalidConfig, s.timeout)
	case s.pageSize < 1 || s.pageSize > maxPageSize:
		return fmt.Errorf("%w: page size %d is not within 1 to %d", ErrInvalidConfig, s.pageSize, maxPageSize)
	}
	return s.retry.validate()
}

// parseBase checks baseURL and returns it without a trailing slash.
func parseBase(baseURL string) (string, error) {
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: base URL: %w", ErrInvalidConfig, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%w: base URL %q: the scheme must be http or https", ErrInvalidConfig, baseURL)
	case u.Host == "":
		return "", fmt.Errorf("%w: base URL %q has no host", ErrInvalidConfig, baseURL)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("%w: base URL %q: no user, query or fragment", ErrInvalidConfig, baseURL)
	}
	return u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/"), nil
}

// checkKey accepts a non-empty key of visible ASCII, which a bearer token
// is.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: the root key is empty", ErrInvalidConfig)
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return fmt.Errorf("%w: the root key has a byte that is not visible ASCII at %d", ErrInvalidConfig, i)
		}
	}
	return nil
}

// idleConnTimeout is how long the client's own transport keeps an idle
// connection. It is under the 10 s within which a Sluice server closes a
// connection that has started no request: Go's transport may dial a
// connection for a call that another connection then serves, and keep the
// new one idle and unused. Closed by the server while the client picks it
// for a Limit, it would fail the call with a reset, which the client does
// not retry (a counting call is never sent twice). Closing it first costs a
// dial after 8 s without calls.
const idleConnTimeout = 8 * time.Second

// newTransport is the client's own transport: keep-alive connections,
// enough idle ones for concurrent callers, HTTP/2 over TLS, and dial and
// handshake timeouts under any sensible call deadline.
func newTransport(tlsConfig *tls.Config) *http.Transport {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   5 * time.Second,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       idleConnTimeout,
		ExpectContinueTimeout: time.Second,
	}
}

// CloseIdleConnections closes the idle connections of the client's own
// transport (not those of a client given with [WithHTTPClient]). The
// client stays usable; call it when done with the client.
func (c *Client) CloseIdleConnections() {
	if c.own != nil {
		c.own.CloseIdleConnections()
	}
}

// endpoint is one operation of the API.
type endpoint struct {
	op string // e.g. "ratelimit.limit"
	// repeatable: sending it again after it may have reached the server
	// does no harm (a read, or a write idempotent by its key).
	repeatable bool
}

var (
	epLimit          = endpoint{"ratelimit.limit", false}
	epMultiLimit     = endpoint{"ratelimit.multiLimit", false}
	epReport         = endpoint{"ratelimit.report", false}
	epMultiReport    = endpoint{"ratelimit.multiReport", false}
	epSetOverride    = endpoint{"ratelimit.setOverride", true}
	epGetOverride    = endpoint{"ratelimit.getOverride", true}
	epListOverrides  = endpoint{"ratelimit.listOverrides", true}
	epDeleteOverride = endpoint{"ratelimit.deleteOverride", true}
)

// envelope is the API's response body.
type envelope struct {
	Meta struct {
		RequestID string `json:"requestId"`
	} `json:"meta"`
	Data       json.RawMessage `json:"data"`
	Pagination *struct {
		Cursor  string `json:"cursor"`
		HasMore bool   `json:"hasMore"`
	} `json:"pagination"`
	Error *struct {
		Title  string       `json:"title"`
		Detail string       `json:"detail"`
		Type   string       `json:"type"`
		Errors []FieldError `json:"errors"`
	} `json:"error"`
}

// outcome is what a call learnt besides its data.
type outcome struct {
	env envelope
	// reachedBefore: an attempt before the last may have reached the
	// server.
	reachedBefore bool
}

// call sends in to ep, with the retries of the package documentation, and
// decodes the answer's data into out.
func (c *Client) call(ctx context.Context, ep endpoint, in, out any) (outcome, error) {
	var oc outcome
	body, err := json.Marshal(in)
	if err != nil {
		return oc, fmt.Errorf("client: %s: encoding the request: %w", ep.op, err)
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	for attempt := 1; ; attempt++ {
		r, connected, err := c.send(ctx, ep.op, body)
		if err == nil && r.status/100 == 2 {
			return oc, r.decode(ep.op, &oc.env, out)
		}
		retry := false
		if err == nil {
			err = r.apiError(ep.op)
			retry = ep.repeatable && retryableStatus(r.status)
		} else {
			err = fmt.Errorf("client: %s: %w", ep.op, err)
			retry = ctx.Err() == nil && retryableTransport(err, connected, ep.repeatable)
		}
		if !retry || attempt >= c.retry.MaxAttempts || !c.retry.wait(ctx, attempt) {
			if attempt > 1 && !isAPIError(err) {
				err = fmt.Errorf("%w (attempt %d)", err, attempt)
			}
			return oc, err
		}
		oc.reachedBefore = oc.reachedBefore || connected
	}
}

func isAPIError(err error) bool {
	var e *APIError
	return errors.As(err, &e)
}

// reply is an answer read whole.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// errTooLarge: the answer's body is over maxResponseBytes.
var errTooLarge = fmt.Errorf("the response is over %d bytes", maxResponseBytes)

// send makes one attempt. connected reports whether a connection was
// obtained for it: from then on the server may have received the request.
func (c *Client) send(ctx context.Context, op string, body []byte) (reply, bool, error) {
	var connected atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, c.base+"/v2/"+op, bytes.NewReader(body))
	if err != nil {
		return reply{}, false, err
	}
	req.Header.Set("Authorization", c.auth)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	res, err := c.hc.Do(req)
	if err != nil {
		return reply{}, connected.Load(), err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes+1))
	switch {
	case err != nil:
		return reply{}, true, err
	case len(b) > maxResponseBytes:
		return reply{}, true, errTooLarge
	}
	return reply{status: res.StatusCode, header: res.Header, body: b}, true, nil
}

// decode reads a 2xx answer: the envelope into env, its data into out.
func (r reply) decode(op string, env *envelope, out any) error {
	if err := json.Unmarshal(r.body, env); err != nil {
		return fmt.Errorf("client: %s: the answer is not the API's JSON: %w", op, err)
	}
	if len(env.Data) == 0 || string(env.Data) == "null" {
		return fmt.Errorf("client: %s: the answer has no data (request %s)", op, env.Meta.RequestID)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("client: %s: decoding data (request %s): %w", op, env.Meta.RequestID, err)
	}
	return nil
}

// apiError turns an answer other than 2xx into an *APIError: the API's
// error object, or for another body (a proxy's page) its first bytes.
func (r reply) apiError(op string) *APIError {
	e := &APIError{Op: op, Status: r.status, RequestID: r.header.Get("X-Request-Id")}
	var env envelope
	if json.Unmarshal(r.body, &env) == nil && env.Error != nil {
		e.Type, e.Title, e.Detail, e.Errors = env.Error.Type, env.Error.Title, env.Error.Detail, env.Error.Errors
		if env.Meta.RequestID != "" {
			e.RequestID = env.Meta.RequestID
		}
		return e
	}
	e.Title = http.StatusText(r.status)
	e.Detail = snippet(r.body)
	return e
}

// snippet is the start of a body that is not the API's JSON, on one line
// of printable ASCII.
func snippet(b []byte) string {
	const maxLen = 200
	if len(b) > maxLen {
		b = b[:maxLen]
	}
	s := strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' {
			return ' '
		}
		return r
	}, string(b))
	return strings.Join(strings.Fields(s), " ")
}
