package redis

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of [Config] and [BreakerConfig]; a zero field means its default.
const (
	DefaultTimeout             = 250 * time.Millisecond
	DefaultMinTTL              = 10 * time.Second
	DefaultConsecutiveFailures = 5
	DefaultFailureRatio        = 0.5
	DefaultMinRequests         = 20
	DefaultBreakerWindow       = 10 * time.Second
	DefaultOpenTimeout         = 3 * time.Second
	DefaultHalfOpenProbes      = 1
)

// TTLWindows is the lifetime of a cell key in windows, counted from the first
// increment of the cell: a cell is read as the current cell during its own
// window and as the previous cell during the next one, so three windows leave
// at least one window of slack for clock skew between nodes.
const TTLWindows = 3

// Config configures an [Origin]. Only Client is required; every other zero
// field takes its documented default. A Config is a plain value: copy it
// freely.
type Config struct {
	// Client is the Redis client: a *goredis.Client (single node), a
	// sentinel-backed failover client or a *goredis.ClusterClient all work,
	// since both cells of a counter share a cluster slot. A
	// *goredis.ClusterClient gets a circuit breaker per master; any other
	// client, one breaker. Required.
	//
	// The caller owns the client: Origin.Close does not close it. Create it
	// with ContextTimeoutEnabled set (NewClient does), otherwise go-redis
	// ignores context deadlines for socket I/O and Timeout cannot bound a
	// call to a stalled Redis; New logs a warning when it can tell.
	Client goredis.UniversalClient

	// Region names the region whose global layer the origin serves
	// (origin.Region: its lease and its queue of nominations). Its keys are
	// apart for each name, so limiters of two regions that share a Redis
	// database never share a leader. Default "default".
	Region string

	// Timeout bounds each Redis call whose context has no deadline, and a
	// cluster client's first load of its slot map. A caller's own deadline
	// is used as it is. Default 250ms.
	Timeout time.Duration

	// MinTTL is the minimum lifetime of a cell key. The lifetime is
	// max(TTLWindows × duration, MinTTL); the floor protects very short
	// windows from clock skew between nodes. Default 10s.
	MinTTL time.Duration

	// Breaker configures each circuit breaker: the one around every call
	// of a client of one server, or each master's on a Redis Cluster.
	Breaker BreakerConfig

	// Logger receives breaker state changes (Warn when it opens, Info
	// otherwise) and the client-configuration warning. nil discards.
	Logger *slog.Logger

	// Observer receives call latencies and breaker state changes. nil means
	// none.
	Observer Observer

	// TracerProvider, if set, receives a client span for every call made on
	// behalf of a traced (recording) request, as a child of the request's
	// span: strict-mode and hydration reads. Background replays carry no
	// trace and are covered by Observer instead. nil means no spans.
	TracerProvider trace.TracerProvider
}

// BreakerConfig configures a circuit breaker (sony/gobreaker v2), which
// counts the calls it guards (all of them on a client of one server, one
// master's on a Redis Cluster). While
// closed, the breaker trips open when either ConsecutiveFailures calls in a
// row failed, or, within the rolling Window, at least MinRequests calls were
// made and the share of failures reached FailureRatio. While open, calls fail
// at once; after OpenTimeout the breaker lets HalfOpenProbes calls through
// (half-open): if they all succeed it closes, if one fails it opens again.
//
// Failures are timeouts, connection errors and outage replies (see
// [OutcomeTimeout], [OutcomeUnavailable]); a caller's cancellation and
// ordinary error replies do not count.
type BreakerConfig struct {
	ConsecutiveFailures uint32        // default 5
	FailureRatio        float64       // in (0, 1]; default 0.5
	MinRequests         uint32        // default 20
	Window              time.Duration // rolling window of the closed state; default 10s
	OpenTimeout         time.Duration // open → half-open; default 3s
	HalfOpenProbes      uint32        // default 1
}

// ErrInvalidConfig is wrapped by every error of [Config.Validate].
var ErrInvalidConfig = errors.New("redis: invalid config")

// Validate reports whether c can build an [Origin]: Client must be set and
// no field may be negative or out of range. Zero fields are valid (they take
// their defaults).
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("client is required"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v is negative", c.Timeout))
	}
	if c.MinTTL < 0 {
		errs = append(errs, fmt.Errorf("min TTL %v is negative", c.MinTTL))
	} else if c.MinTTL > 0 && c.MinTTL < time.Millisecond {
		errs = append(errs, fmt.Errorf("min TTL %v is under 1ms", c.MinTTL))
	}
	b := c.Breaker
	if b.FailureRatio < 0 || b.FailureRatio > 1 {
		errs = append(errs, fmt.Errorf("breaker failure ratio %v is outside [0, 1]", b.FailureRatio))
	}
	if b.Window < 0 {
		errs = append(errs, fmt.Errorf("breaker window %v is negative", b.Window))
	}
	if b.OpenTimeout < 0 {
		errs = append(errs, fmt.Errorf("breaker open timeout %v is negative", b.OpenTimeout))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MinTTL == 0 {
		c.MinTTL = DefaultMinTTL
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	b := &c.Breaker
	if b.ConsecutiveFailures == 0 {
		b.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if b.FailureRatio == 0 {
		b.FailureRatio = DefaultFailureRatio
	}
	if b.MinRequests == 0 {
		b.MinRequests = DefaultMinRequests
	}
	if b.Window == 0 {
		b.Window = DefaultBreakerWindow
	}
	if b.OpenTimeout == 0 {
		b.OpenTimeout = DefaultOpenTimeout
	}
	if b.HalfOpenProbes == 0 {
		b.HalfOpenProbes = DefaultHalfOpenProbes
	}
	return c
}
