package sluice

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/origin"
)

// The defaults [New] gives the zero fields of a [Config] and a
// [GlobalConfig]; each field's doc comment states its own.
const (
	defaultRegion          = "local"
	defaultOriginTimeout   = 250 * time.Millisecond
	defaultOriginBackoff   = time.Second
	defaultOriginMargin    = 0.2
	defaultRefreshAfter    = 5 * time.Second
	defaultReplayWorkers   = 8
	defaultReplayBatch     = 256
	defaultReplayInterval  = 25 * time.Millisecond
	defaultReplayTimeout   = time.Second
	defaultJanitorInterval = 10 * time.Second
	defaultFlushTimeout    = 5 * time.Second
	defaultMaxCounters     = 5_000_000

	defaultGlobalInterval  = 5 * time.Second
	defaultGlobalTimeout   = 5 * time.Second
	defaultDenialMinWindow = time.Minute
	defaultDenialMinUsage  = 0.5
	defaultDenialBatch     = 100
	defaultDenialFlush     = time.Second
	defaultCleanupEvery    = 12
)

// ErrInvalidConfig is returned, wrapped with the reason, by [Config.Validate]
// and [New].
var ErrInvalidConfig = errors.New("sluice: invalid config")

// Config configures a [Limiter]. The zero value is the embedded default: one
// node in region "local" whose own memory is the regional origin, with no
// global layer. Every zero field takes the default documented on it.
type Config struct {
	// Region names the region this limiter serves. Default "local".
	Region string

	// Origin is the regional store that converges the nodes of a region
	// (origin/redis, origin/cluster, origin/memory, or your own). Nil means
	// this limiter is its own origin: decisions are exact for one process
	// and nothing is replayed.
	Origin origin.Origin

	// Global is the layer through which regions converge. Nil means one
	// region: no global layer.
	Global *GlobalConfig

	// Clock is the time used for requests without a Time and for
	// housekeeping. Default: the wall clock, read for requests as one
	// monotonic clock read against a wall-clock base taken every second,
	// and as time.Now elsewhere.
	Clock func() time.Time

	// Logger receives the limiter's logs. Default: discard.
	Logger *slog.Logger

	// Observer receives the limiter's internal measurements, for metrics.
	// Default: none.
	Observer Observer

	// OriginTimeout bounds every synchronous origin call: the hydration of
	// a cold counter, a freshness refresh, a strict-mode decision. On
	// timeout the decision is made from local state. Default 250ms.
	OriginTimeout time.Duration

	// OriginBackoff is how long a counter's strict-mode requests are
	// decided locally after an origin call failed, so that a hanging
	// origin costs each counter at most one OriginTimeout per
	// OriginBackoff. Default 1s.
	OriginBackoff time.Duration

	// OriginMargin is the share of the limit near which the origin decides: a
	// request that would bring the local view above (1-OriginMargin) × limit is
	// decided by the origin in one atomic step, as in strict mode, because the
	// local view may not have seen the other nodes' latest admissions yet. It
	// costs at most one origin call per admission in that last share of each
	// window (denials stay local); a larger margin trades origin calls for
	// accuracy across nodes (docs/benchmarks/decision-path.md measures both). A
	// negative value turns it off (only strict mode asks the origin). Default
	// 0.2.
	OriginMargin float64

	// RefreshAfter is how old a warm counter's last origin read may get
	// before one request refreshes it (the others go on with the local
	// value). Default 5s.
	RefreshAfter time.Duration

	// ReplayWorkers is the number of goroutines that replay accepted
	// increments to the origin. Default 8.
	ReplayWorkers int

	// ReplayBatch is the largest number of cells replayed in one pipelined
	// origin call. Default 256.
	ReplayBatch int

	// ReplayInterval is the pause between two drains of the replay queue:
	// increments to one cell within it coalesce into one origin write. It
	// also paces retries while the origin fails. Shorter converges nodes
	// sooner; longer costs the origin fewer writes. Default 25ms.
	ReplayInterval time.Duration

	// ReplayTimeout bounds one replay call to the origin. A failed replay
	// is sent again with backoff; a write carries the cell's whole count,
	// so one that landed is not counted twice. Default 1s.
	ReplayTimeout time.Duration

	// FlushTimeout bounds the final replay in Close, every call of it
	// together. Default 5s.
	FlushTimeout time.Duration

	// MaxCounters caps the window cells held in memory (a counter holds one
	// cell per active window, two across a rollover): past it, cells are
	// evicted at once, down to 90% of the cap, from the tenants over their
	// share (see MaxCountersPerWorkspace), least recently used first, sparing
	// cells in strict mode or with increments not replayed yet while others can
	// go. An evicted counter is read again from the origin on its next decision
	// (without an origin, it starts again from zero).
	// docs/benchmarks/decision-path.md gives the heap per cell. Default
	// 5,000,000.
	MaxCounters int

	// MaxCountersPerWorkspace, if set, caps the cells one tenant (a
	// workspace) may hold: past it, its own least recently used cells are
	// evicted at the next janitor pass, whatever the others hold. Unset,
	// a tenant's share is MaxCounters divided by the tenants holding
	// cells. Either way, when the table is full, cells are evicted only
	// from tenants over their share, the largest first: a tenant within
	// its share never loses a counter to another tenant's traffic.
	// Default 0 (the fair share).
	MaxCountersPerWorkspace int

	// JanitorInterval is the period of the sweep that evicts cells older
	// than the previous window. Default 10s.
	JanitorInterval time.Duration
}

// GlobalConfig configures the global layer, through which the regions of a
// deployment converge: each region publishes its counts of busy counters and
// pulls the other regions', and propagates denials of abusive counters. One
// node per region at a time, elected through the regional origin when it is
// an origin.Region (the Redis and memory origins), talks to the store; the
// others reach it through the origin. The limiter never calls the store on
// the request path.
type GlobalConfig struct {
	// Store holds what the regions share (global/mysql, global/memory, or
	// your own). Required.
	Store global.Store

	// Interval paces the rounds: publish, pull and denial sync. Every node
	// runs three rounds an interval, each wait a third of it ±20%, so that
	// nodes do not write in step; a region's lease lasts 1.25 intervals.
	// Default 5s.
	Interval time.Duration

	// Timeout bounds one round's calls to the store. Default 5s.
	Timeout time.Duration

	// DisableCounters turns off the global counters (publish and pull of
	// per-region counts); DisableDenials turns off denial propagation.
	// Both are on by default.
	DisableCounters bool
	DisableDenials  bool

	// DenialMinWindow is the shortest window whose denials are propagated:
	// shorter windows end before the other regions would see the row.
	// Default 1m.
	DenialMinWindow time.Duration

	// DenialMinUsage is the share of the limit a counter must have used
	// before the denied request for the denial to be propagated (a single
	// oversized request on a fresh counter is not abuse). Default 0.5.
	DenialMinUsage float64

	// DenialBatch is the most denial rows written in one call, and the
	// queue length that triggers a write before DenialFlush. Default 100.
	DenialBatch int

	// DenialFlush is the longest a denial waits before it is written
	// (checked every DenialFlush). A global round due sooner writes it,
	// after the round's read, leaving out the cells whose row another
	// region wrote meanwhile; otherwise it is written between rounds.
	// Default 1s.
	DenialFlush time.Duration

	// CleanupEvery is the number of intervals between two cleanups of
	// expired rows, which the region's leader runs (and one node at a time
	// of all regions, by the store's lock) in its first round after each
	// multiple of CleanupEvery × Interval on the clock, whichever node
	// leads. Default 12 (a minute at the default interval).
	CleanupEvery int
}

// withDefaults returns c with every zero field set to its default, and its
// own copy of the global settings.
func (c Config) withDefaults() Config {
	if c.Region == "" {
		c.Region = defaultRegion
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	setDefault(&c.OriginTimeout, defaultOriginTimeout)
	setDefault(&c.OriginBackoff, defaultOriginBackoff)
	setDefault(&c.OriginMargin, defaultOriginMargin)
	setDefault(&c.RefreshAfter, defaultRefreshAfter)
	setDefault(&c.ReplayWorkers, defaultReplayWorkers)
	setDefault(&c.ReplayBatch, defaultReplayBatch)
	setDefault(&c.ReplayInterval, defaultReplayInterval)
	setDefault(&c.ReplayTimeout, defaultReplayTimeout)
	setDefault(&c.JanitorInterval, defaultJanitorInterval)
	setDefault(&c.FlushTimeout, defaultFlushTimeout)
	setDefault(&c.MaxCounters, defaultMaxCounters)
	if c.Global != nil {
		g := *c.Global
		setDefault(&g.Interval, defaultGlobalInterval)
		setDefault(&g.Timeout, defaultGlobalTimeout)
		setDefault(&g.DenialMinWindow, defaultDenialMinWindow)
		setDefault(&g.DenialMinUsage, defaultDenialMinUsage)
		setDefault(&g.DenialBatch, defaultDenialBatch)
		setDefault(&g.DenialFlush, defaultDenialFlush)
		setDefault(&g.CleanupEvery, defaultCleanupEvery)
		c.Global = &g
	}
	return c
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate reports the first invalid field of c, wrapped in
// [ErrInvalidConfig]. Zero fields are valid: they take their defaults.
func (c Config) Validate() error {
	fields := []struct {
		name string
		bad  bool
	}{
		{"OriginTimeout", c.OriginTimeout < 0},
		{"OriginBackoff", c.OriginBackoff < 0},
		{"RefreshAfter", c.RefreshAfter < 0},
		{"ReplayWorkers", c.ReplayWorkers < 0},
		{"ReplayBatch", c.ReplayBatch < 0},
		{"ReplayInterval", c.ReplayInterval < 0},
		{"ReplayTimeout", c.ReplayTimeout < 0},
		{"JanitorInterval", c.JanitorInterval < 0},
		{"FlushTimeout", c.FlushTimeout < 0},
		{"MaxCounters", c.MaxCounters < 0},
		{"MaxCountersPerWorkspace", c.MaxCountersPerWorkspace < 0},
	}
	if g := c.Global; g != nil {
		fields = append(fields, []struct {
			name string
			bad  bool
		}{
			{"Global.Interval", g.Interval < 0},
			{"Global.Timeout", g.Timeout < 0},
			{"Global.DenialMinWindow", g.DenialMinWindow < 0},
			{"Global.DenialMinUsage", g.DenialMinUsage < 0},
			{"Global.DenialBatch", g.DenialBatch < 0},
			{"Global.DenialFlush", g.DenialFlush < 0},
			{"Global.CleanupEvery", g.CleanupEvery < 0},
		}...)
	}
	for _, f := range fields {
		if f.bad {
			return fmt.Errorf("%w: %s is negative", ErrInvalidConfig, f.name)
		}
	}
	if c.OriginMargin > 1 {
		return fmt.Errorf("%w: OriginMargin %v is above 1", ErrInvalidConfig, c.OriginMargin)
	}
	if g := c.Global; g != nil {
		if g.Store == nil {
			return fmt.Errorf("%w: Global.Store is nil", ErrInvalidConfig)
		}
		if g.DenialMinUsage > 1 {
			return fmt.Errorf("%w: Global.DenialMinUsage %v is above 1", ErrInvalidConfig, g.DenialMinUsage)
		}
	}
	return nil
}
