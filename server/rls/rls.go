// Package rls is Sluice's Envoy Rate Limit Service:
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, served with
// connect-go (gRPC over h2c, gRPC-Web and Connect on one HTTP handler:
// [Service.Handler]) or with grpc-go (gRPC only, answers never compressed:
// [Service.NewGRPCServer]), and decided by Sluice's sliding window.
//
// Rules come from the YAML format of envoyproxy/ratelimit (a domain per file,
// nested descriptors with rate_limit, unlimited, shadow_mode and replaces),
// plus unit_multiplier for windows of any whole number of units and
// report, which counts a descriptor's hits as usage after the fact (never
// OVER_LIMIT, counted even past the limit, as Envoy's response-path
// hits_addend needs); see [Load].
// Each limited descriptor of a request becomes one sluice.Request in
// workspace [Workspace], namespace = the domain, identifier = the
// descriptor's entries. The enforced descriptors of one call are decided
// all-or-nothing with one RatelimitMany: a call denied on one descriptor
// spends nothing on the others. docs/reference/rls-config.md describes the
// format, the matching rules and the differences from envoyproxy/ratelimit.
package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
)

// Procedure is the gRPC method this package serves; [Service.Handler]
// returns it as the path to mount the handler on.
const Procedure = rlsv3.RateLimitService_ShouldRateLimit_FullMethodName

// Workspace prefixes the workspace of every counter this service decides:
// a domain's counters live in workspace [WorkspaceOf] the domain, so each
// domain is a tenant of its own for the limiter's memory (one domain's
// traffic never evicts another's counters, nor an HTTP API workspace's). It
// contains a space, which no HTTP API root key's workspace may contain, so
// RLS counters never share an identity with HTTP API counters.
const Workspace = "envoy rls"

// WorkspaceOf returns the workspace of the counters of domain.
func WorkspaceOf(domain string) string { return Workspace + ":" + domain }

// DefaultMaxMessageBytes caps a request message (1 MiB).
const DefaultMaxMessageBytes = 1 << 20

// Caps on a ShouldRateLimit call. A call over any of them is refused with
// InvalidArgument, naming the cap, before any counter is read or created.
const (
	// MaxDescriptors caps the descriptors of one call: each limited one is
	// a counter.
	MaxDescriptors = 64
	// MaxEntries caps the entries of one descriptor.
	MaxEntries = 8
	// MaxEntryBytes caps the key and the value of an entry, like the HTTP
	// API's identifiers. A counter's identifier, the entries encoded, is
	// then at most 8 × 2 × (3 + 1 + 512) = 8256 bytes.
	MaxEntryBytes = 512
	// MaxDomainBytes caps a domain, in the rules and in a call, so that the
	// workspace of its counters ([WorkspaceOf]) is at most 255 bytes.
	MaxDomainBytes = 255 - len(Workspace) - 1
	// MaxWindow caps the window of a descriptor's own limit, like the HTTP
	// API's durations (30 days).
	MaxWindow = 30 * 24 * time.Hour
)

// ErrInvalidRequest wraps the reason a ShouldRateLimit call was refused
// with InvalidArgument. Check for it with errors.Is.
var ErrInvalidRequest = errors.New("rls: invalid request")

// Limiter decides rate-limit requests and counts reported usage;
// *sluice.Limiter implements it. RatelimitMany and ReportMany must not
// keep rs once they return: the service reuses it for its next call.
type Limiter interface {
	Ratelimit(ctx context.Context, r sluice.Request) (sluice.Response, error)
	RatelimitMany(ctx context.Context, rs []sluice.Request) ([]sluice.Response, error)
	// ReportMany counts the hits of the descriptors of report rules,
	// never denied (see sluice.Limiter.ReportMany).
	ReportMany(ctx context.Context, rs []sluice.Request) ([]sluice.Response, error)
}

// Outcome is the result of one ShouldRateLimit call, as reported to an
// [Observer]. Its values are lower-case words fit for metric labels.
type Outcome string

// The outcomes of a call.
const (
	// OutcomeOK: the call is under every enforced limit.
	OutcomeOK Outcome = "ok"
	// OutcomeOverLimit: at least one enforced limit denied the call.
	OutcomeOverLimit Outcome = "over_limit"
	// OutcomeShadowOverLimit: the call passed, but a shadow_mode limit
	// would have denied it.
	OutcomeShadowOverLimit Outcome = "shadow_over_limit"
	// OutcomeReported: every limited descriptor of the call was a report
	// (a rule with report: true, hits above 0): counted, never denied.
	OutcomeReported Outcome = "reported"
	// OutcomeInvalid: the request was rejected with InvalidArgument.
	OutcomeInvalid Outcome = "invalid"
	// OutcomeUnavailable: the limiter failed; the call got Unavailable.
	OutcomeUnavailable Outcome = "unavailable"
)

// Observer is told the outcome of every call. Implementations must be safe
// for concurrent use and fast (they run on the request path).
type Observer interface {
	// Decided reports one call. domain is the request's domain when the
	// ruleset configures it and "" otherwise, so that labels stay bounded.
	Decided(domain string, outcome Outcome)
}

// NopObserver is an [Observer] that does nothing.
type NopObserver struct{}

// Decided does nothing.
func (NopObserver) Decided(string, Outcome) {}

// Recorder records decisions for analytics; *analytics.Recorder
// implements it. Record must return at once: it runs on the request path.
type Recorder interface {
	// Record records one decision on identifier in workspace's namespace,
	// made at now.
	Record(workspace, namespace, identifier string, passed bool, now time.Time)
}

// DefaultOriginTimeout is the default of Config.OriginTimeout: the
// limiter's default OriginTimeout.
const DefaultOriginTimeout = 250 * time.Millisecond

// Config configures a [Service].
type Config struct {
	// Limiter makes the decisions. Required.
	Limiter Limiter
	// Domains is the ruleset to start with; replace it later with
	// [Service.SetRuleset]. Required.
	Domains *Ruleset
	// Logger receives limiter failures and ruleset changes. Default: discard.
	Logger *slog.Logger
	// Observer is told the outcome of every call. Default: [NopObserver].
	Observer Observer
	// Clock supplies the time of each call, used as the time of its
	// decisions and to compute duration_until_reset. Give it the limiter's
	// clock if that is not time.Now. Default time.Now.
	Clock func() time.Time
	// MaxMessageBytes caps the size of a request message. Default
	// DefaultMaxMessageBytes.
	MaxMessageBytes int
	// OriginTimeout is the limiter's OriginTimeout. A call with
	// shadow-mode checks makes several decisions; they share one deadline,
	// this long from the call's start (or the caller's, if sooner), so the
	// call waits on the origin at most this long in all, as one decision
	// does. Default DefaultOriginTimeout, the limiter's default.
	OriginTimeout time.Duration
	// Recorder, if set, records every enforced decision (not the reports:
	// they decide nothing): in workspace
	// WorkspaceOf(domain), namespace domain, under the descriptor's
	// counter identifier (up to 8,256 bytes; *analytics.Recorder keeps at
	// most analytics.MaxIdentifierBytes of it). Shadow-mode checks are not
	// recorded. Default: none.
	Recorder Recorder
}

// Validate reports the first invalid field of c.
func (c Config) Validate() error {
	switch {
	case c.Limiter == nil:
		return fmt.Errorf("%w: Limiter is nil", ErrInvalidConfig)
	case c.Domains == nil:
		return fmt.Errorf("%w: Domains is nil", ErrInvalidConfig)
	case c.MaxMessageBytes < 0:
		return fmt.Errorf("%w: MaxMessageBytes is negative", ErrInvalidConfig)
	case c.OriginTimeout < 0:
		return fmt.Errorf("%w: OriginTimeout is negative", ErrInvalidConfig)
	}
	return nil
}

// Service answers ShouldRateLimit calls. It is safe for concurrent use.
// Create it with [New] (the zero Service is not usable) and mount
// [Service.Handler], or serve [Service.NewGRPCServer].
type Service struct {
	cfg   Config
	rules atomic.Pointer[Ruleset]
}

// New validates cfg, applies its defaults and builds the service.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.OriginTimeout == 0 {
		cfg.OriginTimeout = DefaultOriginTimeout
	}
	s := &Service{cfg: cfg}
	s.rules.Store(cfg.Domains)
	return s, nil
}

// SetRuleset replaces the ruleset atomically: calls that start afterwards
// use rs, calls in flight finish with the one they started with. A nil rs is
// ignored (and logged), so a failed reload keeps the rules in force.
func (s *Service) SetRuleset(rs *Ruleset) {
	if rs == nil {
		s.cfg.Logger.Error("rls: SetRuleset(nil) ignored; keeping the current rules")
		return
	}
	s.rules.Store(rs)
	s.cfg.Logger.Info("rls: rules loaded", "domains", rs.Domains())
}

// Ruleset returns the ruleset in force.
func (s *Service) Ruleset() *Ruleset { return s.rules.Load() }

// Handler returns the path to mount and the handler that serves
// ShouldRateLimit over gRPC, gRPC-Web and Connect; it compresses no answer
// under minCompressBytes, whatever the client accepts. gRPC needs HTTP/2: to
// serve Envoy without TLS, enable unencrypted HTTP/2 (h2c) on the
// http.Server (Protocols.SetUnencryptedHTTP2), next to HTTP/1.1.
func (s *Service) Handler() (path string, h http.Handler) {
	return Procedure, connect.NewUnaryHandlerSimple(Procedure, s.ShouldRateLimit,
		connect.WithReadMaxBytes(s.cfg.MaxMessageBytes),
		connect.WithCompressMinBytes(minCompressBytes),
		connect.WithRecover(func(_ context.Context, _ connect.Spec, _ http.Header, p any) error {
			s.cfg.Logger.Error("rls: panic in ShouldRateLimit", "panic", p)
			return connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}),
	)
}

// minCompressBytes is the smallest answer the connect handler compresses
// for a client that accepts it: an RLS answer is a few dozen bytes per
// descriptor, and compressing one costs more CPU than it saves.
const minCompressBytes = 1024

// errUnavailable is the message of every Unavailable answer: the
// limiter's error may name internals, so its text goes to the log only.
var errUnavailable = errors.New("rls: the limiter is unavailable (shutting down, or the call was cut); retry")

// unavailable is a limiter failure as a caller sees it: errUnavailable's
// text (what goes on the wire), and both it and the cause to errors.Is.
type unavailable struct{ cause error }

func (e unavailable) Error() string   { return errUnavailable.Error() }
func (e unavailable) Unwrap() []error { return []error{errUnavailable, e.cause} }

// ShouldRateLimit decides one request. Errors are *connect.Error values:
// CodeInvalidArgument for a malformed request, CodeUnavailable when the
// limiter fails. A denial is a response with overall_code OVER_LIMIT.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	dom := s.rules.Load().domains[req.GetDomain()] // nil: not configured
	label := ""
	if dom != nil {
		label = req.GetDomain()
	}
	c := getCall()
	defer c.put()
	if err := dom.checks(req, c); err != nil {
		s.cfg.Observer.Decided(label, OutcomeInvalid)
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%w: %w", ErrInvalidRequest, err))
	}
	c.domain, c.workspace = req.GetDomain(), dom.workspaceOf(req.GetDomain())
	c.now = time.UnixMilli(s.cfg.Clock().UnixMilli()) // the limiter's resolution
	res, outcome, err := s.decide(ctx, c)
	if err != nil {
		if errors.Is(err, sluice.ErrInvalidRequest) {
			s.cfg.Observer.Decided(label, OutcomeInvalid)
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		s.cfg.Logger.Warn("rls: limiter failed", "domain", req.GetDomain(), "err", err)
		s.cfg.Observer.Decided(label, OutcomeUnavailable)
		return nil, connect.NewError(connect.CodeUnavailable, unavailable{err})
	}
	s.cfg.Observer.Decided(label, outcome)
	return res, nil
}

// check is one descriptor of a request: its counter, the rule that
// limits it (nil: none) and how the call decides it (see planOf).
type check struct {
	rule *rule
	id   string // the counter identifier
	cost int64
	kind kind
}

// kind is how a call decides one of its checks.
type kind uint8

const (
	settled  kind = iota // answered without the limiter: no rule, or unlimited
	enforced             // in the call's all-or-nothing batch
	shadow               // decided alone, never denies the call
	reported             // counted with ReportMany, never denied
)

// checks validates req, a call to domain d (nil: a domain not
// configured), and fills c.checks with the rule of each descriptor.
func (d *domain) checks(req *rlsv3.RateLimitRequest, c *call) error {
	switch n := len(req.GetDescriptors()); {
	case req.GetDomain() == "":
		return errors.New("domain is empty")
	case len(req.GetDomain()) > MaxDomainBytes:
		return fmt.Errorf("domain is %d bytes, over the cap of %d", len(req.GetDomain()), MaxDomainBytes)
	case n == 0:
		return errors.New("descriptors are empty")
	case n > MaxDescriptors:
		return fmt.Errorf("%d descriptors, over the cap of %d per call", n, MaxDescriptors)
	}
	var root *node
	limits := false
	if d != nil {
		root, limits = d.root, d.limits
	}
	var buf [MaxEntries]entry
	replaced := false
	for i, desc := range req.GetDescriptors() {
		entries, err := entriesOf(desc, buf[:0])
		if err != nil {
			return fmt.Errorf("descriptor %d: %w", i, err)
		}
		ch := check{id: identifier(entries)}
		if ch.cost, err = cost(req, desc); err != nil {
			return fmt.Errorf("descriptor %d: %w", i, err)
		}
		var override *rule
		if desc.GetLimit() != nil && limits {
			if override, err = overrideRule(desc.GetLimit()); err != nil {
				return fmt.Errorf("descriptor %d: limit: %w", i, err)
			}
		}
		switch {
		case root == nil: // unknown domain: nothing is limited
		case override != nil:
			// The descriptor's own limit replaces its rule's, but a
			// report rule's descriptors stay reports.
			if r := root.match(entries); r != nil && r.report {
				override.report = true
			}
			ch.rule = override
		default:
			ch.rule = root.match(entries)
		}
		replaced = replaced || ch.rule != nil && len(ch.rule.replaces) > 0
		c.checks = append(c.checks, ch)
	}
	if replaced {
		unreplaced(c.checks)
	}
	return nil
}

// unreplaced drops the rule of every limited check whose rule another
// check's rule replaces.
func unreplaced(checks []check) {
	replaced := make(map[string]bool)
	for _, c := range checks {
		if c.rule != nil {
			for _, name := range c.rule.replaces {
				replaced[name] = true
			}
		}
	}
	for i, c := range checks {
		if c.rule != nil && !c.rule.unlimited && c.rule.name != "" && replaced[c.rule.name] {
			checks[i].rule = nil
		}
	}
}

// entriesOf appends the entries of d to buf and returns them; d must be a
// list of 1 to MaxEntries entries whose keys and values are 1 to
// MaxEntryBytes long.
func entriesOf(d *ratelimitv3.RateLimitDescriptor, buf []entry) ([]entry, error) {
	switch n := len(d.GetEntries()); {
	case n == 0:
		return nil, errors.New("entries are empty")
	case n > MaxEntries:
		return nil, fmt.Errorf("%d entries, over the cap of %d per descriptor", n, MaxEntries)
	}
	entries := buf
	for i, e := range d.GetEntries() {
		switch {
		case e.GetKey() == "":
			return nil, fmt.Errorf("entry %d: key is empty", i)
		case len(e.GetKey()) > MaxEntryBytes:
			return nil, fmt.Errorf("entry %d: key is %d bytes, over the cap of %d", i, len(e.GetKey()), MaxEntryBytes)
		case e.GetValue() == "":
			return nil, fmt.Errorf("entry %d (%q): value is empty", i, e.GetKey())
		case len(e.GetValue()) > MaxEntryBytes:
			return nil, fmt.Errorf("entry %d (%q): value is %d bytes, over the cap of %d", i, e.GetKey(), len(e.GetValue()), MaxEntryBytes)
		}
		entries = append(entries, entry{e.GetKey(), e.GetValue()})
	}
	return entries, nil
}

// cost is what descriptor d spends: its own hits_addend when set (0 checks
// without spending), else the request's, where 0 means 1.
func cost(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) (int64, error) {
	if d.GetIsNegativeHits() {
		return 0, errors.New("is_negative_hits is not supported")
	}
	if h := d.GetHitsAddend(); h != nil {
		if h.GetValue() > math.MaxInt64 {
			return 0, fmt.Errorf("hits_addend %d is too large", h.GetValue())
		}
		return int64(h.GetValue()), nil
	}
	return max(1, int64(req.GetHitsAddend())), nil
}

// overrideRule is the rule of a descriptor that carries its own limit, in
// a domain that allows it: its window is at most MaxWindow.
func overrideRule(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) (*rule, error) {
	v, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[o.GetUnit().String()]
	length, known := unitLengths[rlsv3.RateLimitResponse_RateLimit_Unit(v)]
	if !ok || !known {
		return nil, fmt.Errorf("unit %v is not supported", o.GetUnit())
	}
	r := &rule{limit: int64(o.GetRequestsPerUnit()), unit: rlsv3.RateLimitResponse_RateLimit_Unit(v), multiplier: 1}
	if m := o.GetUnitMultiplier(); m != nil {
		if m.GetValue() < 1 || int64(m.GetValue()) > math.MaxInt64/int64(length) {
			return nil, fmt.Errorf("unit_multiplier %d is out of range for unit %v", m.GetValue(), o.GetUnit())
		}
		r.multiplier = m.GetValue()
	}
	r.window = length * time.Duration(r.multiplier)
	if r.window > MaxWindow {
		return nil, fmt.Errorf("a window of %v is over the cap of %v (30 days)", r.window, MaxWindow)
	}
	return r.withCurrentLimit(), nil
}

// identifier encodes entries as a counter identifier: every key and value
// as its length in decimal bytes, a colon, and the bytes themselves, so that
// distinct entry lists never share an identifier, whatever bytes they hold.
func identifier(entries []entry) string {
	size := 0
	for _, e := range entries {
		size += len(e.key) + len(e.value) + 2*(1+decimalDigits(len(e.key)|len(e.value)))
	}
	var b strings.Builder
	b.Grow(size)
	for _, e := range entries {
		for _, s := range [2]string{e.key, e.value} {
			b.WriteString(strconv.Itoa(len(s)))
			b.WriteByte(':')
			b.WriteString(s)
		}
	}
	return b.String()
}

// decimalDigits returns the number of decimal digits of n >= 0 (an upper
// bound is enough: it sizes a buffer).
func decimalDigits(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// plan sorts the checks of a call: it sets each one's kind, and counts
// the enforced, shadow and reported ones.
type plan struct {
	enforced, shadow, reports int
}

// planOf sorts c's checks and makes the answer's statuses, filling those
// settled without the limiter (no rule, unlimited). A check of a report
// rule that spends nothing is enforced: it asks whether the limit is
// spent, as a peek.
func planOf(c *call) plan {
	var p plan
	c.resp, c.statuses = newAnswer(len(c.checks))
	for i := range c.checks {
		ch := &c.checks[i]
		switch {
		case ch.rule == nil:
			ch.kind = settled
			c.statuses[i].status.Code = rlsv3.RateLimitResponse_OK
		case ch.rule.unlimited:
			ch.kind = settled
			c.statuses[i].status.Code, c.statuses[i].status.LimitRemaining = rlsv3.RateLimitResponse_OK, math.MaxUint32
		case ch.rule.report && ch.cost > 0:
			ch.kind = reported
			p.reports++
		case ch.rule.shadow:
			ch.kind = shadow
			p.shadow++
		default:
			ch.kind = enforced
			p.enforced++
		}
	}
	return p
}

// calls returns how many limiter calls the plan makes.
func (p *plan) calls() int {
	n := p.shadow
	if p.enforced > 0 {
		n++
	}
	if p.reports > 0 {
		n++
	}
	return n
}

// call is one ShouldRateLimit call being decided: its domain, its time,
// its checks, the answer being built and the buffer of its limiter
// requests. Calls are pooled: put clears one, so that the pool holds no
// request's strings and no answer.
type call struct {
	domain, workspace string
	now               time.Time
	checks            []check
	batch             []sluice.Request
	resp              *rlsv3.RateLimitResponse
	statuses          []statusWithReset // the answer's, in the order of checks
}

// maxPooledCall is the most checks of a call put back in the pool: the
// buffers of a call of MaxDescriptors are kept.
const maxPooledCall = MaxDescriptors

var callPool = sync.Pool{New: func() any { return new(call) }}

// getCall returns an empty call from the pool.
func getCall() *call { return callPool.Get().(*call) }

// put clears c and returns it to the pool.
func (c *call) put() {
	if cap(c.checks) > maxPooledCall || cap(c.batch) > maxPooledCall {
		return
	}
	clear(c.checks)
	clear(c.batch)
	*c = call{checks: c.checks[:0], batch: c.batch[:0]}
	callPool.Put(c)
}

// requests returns the limiter's requests of the checks of kind k, in
// order, in c's buffer: valid until the next call of requests.
func (c *call) requests(k kind) []sluice.Request {
	c.batch = c.batch[:0]
	for i := range c.checks {
		if c.checks[i].kind == k {
			c.batch = append(c.batch, c.request(i, c.checks[i].cost))
		}
	}
	return c.batch
}

// request is the limiter's request for check i spending cost.
func (c *call) request(i int, cost int64) sluice.Request {
	ch := c.checks[i]
	return sluice.Request{
		Workspace: c.workspace, Namespace: c.domain, Identifier: ch.id,
		Limit: ch.rule.limit, Duration: ch.rule.window, Cost: cost, Time: c.now,
	}
}

// decide asks the limiter about every limited check of c. The reports
// are counted first, whatever the rest does: that usage has been spent
// already. The enforced checks are one all-or-nothing batch; shadow
// checks are decided one by one after it, spending only when the batch
// passed (a denied call spends nothing anywhere) and never denying the
// call. With several limiter calls, they share one deadline
// (Config.OriginTimeout).
func (s *Service) decide(ctx context.Context, c *call) (*rlsv3.RateLimitResponse, Outcome, error) {
	p := planOf(c)
	if p.calls() > 1 {
		// Several decisions: one deadline for all their origin waits.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.OriginTimeout)
		defer cancel()
	}
	if err := s.report(ctx, c, &p); err != nil {
		return nil, "", err
	}
	passed, err := s.enforce(ctx, c, &p)
	if err != nil {
		return nil, "", err
	}
	shadowDenied := false
	for i := range c.checks {
		if c.checks[i].kind != shadow {
			continue
		}
		cost := c.checks[i].cost
		if !passed {
			cost = 0 // peek: a denied call spends nothing
		}
		res, err := s.cfg.Limiter.Ratelimit(ctx, c.request(i, cost))
		if err != nil {
			return nil, "", err
		}
		c.status(i, res, true)
		shadowDenied = shadowDenied || !res.Success
	}

	resp := c.resp
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	switch {
	case !passed:
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		return resp, OutcomeOverLimit, nil
	case shadowDenied:
		return resp, OutcomeShadowOverLimit, nil
	case p.reports > 0 && p.enforced == 0 && p.shadow == 0:
		return resp, OutcomeReported, nil
	}
	return resp, OutcomeOK, nil
}

// report counts the reported checks of c with one ReportMany and sets
// their statuses: OK, with what remains after them.
func (s *Service) report(ctx context.Context, c *call, p *plan) error {
	if p.reports == 0 {
		return nil
	}
	batch := c.requests(reported)
	out, err := s.cfg.Limiter.ReportMany(ctx, batch)
	if err == nil && len(out) != len(batch) {
		err = fmt.Errorf("limiter answered %d of %d reports", len(out), len(batch))
	}
	if err != nil {
		return err
	}
	j := 0
	for i := range c.checks {
		if c.checks[i].kind == reported {
			c.status(i, out[j], true)
			j++
		}
	}
	return nil
}

// enforce decides the enforced checks of c all-or-nothing with one
// RatelimitMany, sets their statuses and records them, and reports
// whether the batch passed (true without enforced checks).
func (s *Service) enforce(ctx context.Context, c *call, p *plan) (bool, error) {
	if p.enforced == 0 {
		return true, nil
	}
	batch := c.requests(enforced)
	out, err := s.cfg.Limiter.RatelimitMany(ctx, batch)
	if err == nil && len(out) != len(batch) {
		err = fmt.Errorf("limiter answered %d of %d requests", len(out), len(batch))
	}
	if err != nil {
		return false, err
	}
	passed := true
	j := 0
	for i := range c.checks {
		if c.checks[i].kind != enforced {
			continue
		}
		c.status(i, out[j], out[j].Success)
		passed = passed && out[j].Success
		if rec := s.cfg.Recorder; rec != nil {
			rec.Record(c.workspace, c.domain, c.checks[i].id, out[j].Success, c.now)
		}
		j++
	}
	return passed, nil
}

// status sets the status of check i after the decision res (ok: OK, else
// OVER_LIMIT) on its rule.
func (c *call) status(i int, res sluice.Response, ok bool) {
	sd := &c.statuses[i]
	reset := max(res.Reset.Sub(c.now), 0)
	sd.reset.Seconds, sd.reset.Nanos = int64(reset/time.Second), int32(reset%time.Second)
	st := &sd.status
	st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	st.CurrentLimit = c.checks[i].rule.currentLimit()
	st.LimitRemaining = uint32(min(max(res.Remaining, 0), math.MaxUint32))
	st.DurationUntilReset = &sd.reset
	if ok {
		st.Code = rlsv3.RateLimitResponse_OK
	}
}

// statusWithReset allocates a descriptor status and its time to reset
// together.
type statusWithReset struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	reset  durationpb.Duration
}

// An answer of up to answerStatuses statuses is one allocation: the
// response, its statuses and their times to reset.
const answerStatuses = 4

// answer holds a response of 2 to answerStatuses statuses, answer1 one
// of one status.
type (
	answer struct {
		resp     rlsv3.RateLimitResponse
		ptrs     [answerStatuses]*rlsv3.RateLimitResponse_DescriptorStatus
		statuses [answerStatuses]statusWithReset
	}
	answer1 struct {
		resp     rlsv3.RateLimitResponse
		ptrs     [1]*rlsv3.RateLimitResponse_DescriptorStatus
		statuses [1]statusWithReset
	}
)

// newAnswer returns an empty response whose Statuses are the n statuses
// returned beside it (to be filled in place), allocated together when n
// is at most answerStatuses.
func newAnswer(n int) (*rlsv3.RateLimitResponse, []statusWithReset) {
	var ptrs []*rlsv3.RateLimitResponse_DescriptorStatus
	var statuses []statusWithReset
	var resp *rlsv3.RateLimitResponse
	switch {
	case n == 1:
		a := new(answer1)
		resp, ptrs, statuses = &a.resp, a.ptrs[:], a.statuses[:]
	case n <= answerStatuses:
		a := new(answer)
		resp, ptrs, statuses = &a.resp, a.ptrs[:n], a.statuses[:n]
	default:
		resp = new(rlsv3.RateLimitResponse)
		ptrs, statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n), make([]statusWithReset, n)
	}
	for i := range ptrs {
		ptrs[i] = &statuses[i].status
	}
	resp.Statuses = ptrs
	return resp, statuses
}
