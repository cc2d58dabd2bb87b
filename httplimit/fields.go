package httplimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// DefaultPolicyName is the name of a [Policy] that has none.
const DefaultPolicyName = "default"

// maxNameBytes bounds a policy's name, which is a namespace (the server
// takes 512 bytes).
const maxNameBytes = 512

// maxKeyBytes bounds a key used as it is; longer ones are hashed.
const maxKeyBytes = 256

// maxSFInteger is the largest Integer of a structured field (RFC 9651).
const maxSFInteger = 999_999_999_999_999

// Policy is a limit on the requests of each key: Limit units (requests, by
// default of cost 1) per sliding Window.
type Policy struct {
	// Name names the policy in the RateLimit and RateLimit-Policy fields,
	// and is the namespace of its counters, so that policies of different
	// names never share a counter (the server's overrides of that
	// namespace apply to them). 1 to 512 bytes of printable ASCII;
	// DefaultPolicyName when empty.
	Name string
	// Limit is the number of units a key may spend per window, 0 or more.
	Limit int64
	// Window is the length of the sliding window, at least a millisecond
	// (1 s to 30 days for a [Remote] limiter).
	Window time.Duration
}

func (p Policy) withDefaults() Policy {
	if p.Name == "" {
		p.Name = DefaultPolicyName
	}
	return p
}

// Validate reports why p cannot be applied, as an error wrapping
// [ErrInvalidPolicy]; an empty Name stands for [DefaultPolicyName].
func (p Policy) Validate() error {
	p = p.withDefaults()
	switch {
	case len(p.Name) > maxNameBytes:
		return fmt.Errorf("%w: policy name of %d bytes, over %d", ErrInvalidPolicy, len(p.Name), maxNameBytes)
	case strings.IndexFunc(p.Name, func(r rune) bool { return r < ' ' || r > '~' }) >= 0:
		return fmt.Errorf("%w: policy name %q is not printable ASCII", ErrInvalidPolicy, p.Name)
	case p.Limit < 0:
		return fmt.Errorf("%w: policy %q: limit %d is negative", ErrInvalidPolicy, p.Name, p.Limit)
	case p.Window < time.Millisecond:
		return fmt.Errorf("%w: policy %q: window %v is under a millisecond", ErrInvalidPolicy, p.Name, p.Window)
	}
	return nil
}

// Result is the decision on one request under its policy: what the
// middleware puts in the request's context ([FromContext]) and what its
// header fields say.
type Result struct {
	// Policy is the policy the request was decided under.
	Policy Policy
	// Decision is the limiter's answer.
	Decision Decision
	// Cost is what the request asked to spend.
	Cost int64
	// At is when the decision was received.
	At time.Time
}

// Check decides one request of key, costing cost, under p, with l: what the
// middleware does for each request, for other transports (grpclimit). A
// key that is not printable UTF-8 of at most 256 bytes is replaced by its
// SHA-256 ("sha256:" and 32 hex digits), so that any key is a valid
// identifier; an empty key is [ErrNoKey]. Errors are an invalid policy
// ([ErrInvalidPolicy]), a negative cost, or the limiter's error.
func Check(ctx context.Context, l Limiter, p Policy, key string, cost int64) (Result, error) {
	p = p.withDefaults()
	if err := p.Validate(); err != nil {
		return Result{}, err
	}
	if key == "" {
		return Result{}, ErrNoKey
	}
	if cost < 0 {
		return Result{}, fmt.Errorf("httplimit: cost %d is negative", cost)
	}
	d, err := l.Limit(ctx, Request{Namespace: p.Name, Identifier: identifier(key), Limit: p.Limit, Window: p.Window, Cost: cost})
	if err != nil {
		return Result{}, fmt.Errorf("httplimit: limiter: %w", err)
	}
	return Result{Policy: p, Decision: d, Cost: cost, At: time.Now()}, nil
}

// identifier is key if it is a valid identifier of a reasonable length,
// else its hash.
func identifier(key string) string {
	if len(key) <= maxKeyBytes && utf8.ValidString(key) && strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// PolicyField is the value of the RateLimit-Policy field: the policy's
// name, its quota q (the limit applied) and its window w in seconds
// (rounded up), e.g. `"default";q=100;w=60`.
func (r Result) PolicyField() string {
	b := appendSFString(make([]byte, 0, 48), r.Policy.Name)
	b = append(b, ";q="...)
	b = appendSFInteger(b, r.Decision.Limit)
	b = append(b, ";w="...)
	b = appendSFInteger(b, ceilSeconds(r.Policy.Window))
	return string(b)
}

// RateLimitField is the value of the RateLimit field: the policy's name,
// the quota r remaining and the seconds t (rounded up) until the current
// window cell ends, within which no more than r may be spent, e.g.
// `"default";r=42;t=17`.
func (r Result) RateLimitField() string {
	b := appendSFString(make([]byte, 0, 48), r.Policy.Name)
	b = append(b, ";r="...)
	b = appendSFInteger(b, r.Decision.Remaining)
	b = append(b, ";t="...)
	b = appendSFInteger(b, ceilSeconds(r.untilReset()))
	return string(b)
}

// RetryAfter is, for a denial, how long until the same request passes if
// the key spends nothing meanwhile, in whole seconds (at least 1, never
// less than the RateLimit field's t). Sluice's window weighs the previous
// cell's usage u by floor(u·(W-e)/W) at e into the current one, so past the
// end of the current cell the request passes once that leaves room for its
// cost. The usage is taken as Limit-Remaining (Limit when nothing remains),
// all of it in the current cell: exact in that case, an upper bound when
// part of it is older. A cost over the limit waits until everything counted
// so far has faded, the end of the cell plus a window.
func (r Result) RetryAfter() time.Duration {
	d := r.Decision
	wait := r.untilReset() + r.Policy.Window
	used := d.Limit - d.Remaining
	if d.Remaining <= 0 {
		used = d.Limit
	}
	if r.Cost <= d.Limit && used > 0 {
		wait = r.untilReset() + time.Duration(fadeMillis(used, d.Limit-r.Cost, r.Policy.Window.Milliseconds()))*time.Millisecond
	}
	return time.Duration(max(ceilSeconds(wait), 1)) * time.Second
}

// fadeMillis is the least e >= 0, in ms into a window of w ms, at which a
// previous cell holding used units weighs no more than room:
// floor(used·(w-e)/w) <= room, i.e. used·e > w·(used-room-1). The product
// is taken on 128 bits.
func fadeMillis(used, room, w int64) int64 {
	if used <= room {
		return 0
	}
	hi, lo := bits.Mul64(uint64(w), uint64(used-room-1))
	q, _ := bits.Div64(hi, lo, uint64(used)) // hi < used: used-room-1 < used
	return int64(q) + 1
}

// untilReset is the time from the decision to the end of its cell, 0 if
// past.
func (r Result) untilReset() time.Duration {
	return max(r.Decision.Reset.Sub(r.At), 0)
}

// SetHeaders sets the RateLimit-Policy and RateLimit fields in h, and
// Retry-After (delta-seconds) for a denial.
func (r Result) SetHeaders(h http.Header) {
	h.Set("RateLimit-Policy", r.PolicyField())
	h.Set("RateLimit", r.RateLimitField())
	if !r.Decision.Allowed {
		h.Set("Retry-After", strconv.FormatInt(int64(r.RetryAfter()/time.Second), 10))
	}
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// appendSFString appends s, printable ASCII, as a structured-field String
// (RFC 9651 §4.1.6): quoted, with '"' and '\' escaped.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// appendSFInteger appends n as a structured-field Integer, clamped to the
// range the format allows (0 to 999,999,999,999,999 here).
func appendSFInteger(b []byte, n int64) []byte {
	return strconv.AppendInt(b, min(max(n, 0), maxSFInteger), 10)
}
