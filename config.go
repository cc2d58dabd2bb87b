package sluice

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/origin"
)

// Defaults applied by [New] to the zero fields of a [Config].
const (
	DefaultRegion          = "local"
	DefaultOriginTimeout   = 250 * time.Millisecond
	DefaultOriginBackoff   = time.Second
	DefaultOriginMargin    = 0.2
	DefaultRefreshAfter    = 5 * time.Second
	DefaultReplayWorkers   = 8
	DefaultReplayBatch     = 256
	DefaultReplayInterval  = 25 * time.Millisecond
	DefaultReplayTimeout   = time.Second
	DefaultJanitorInterval = 10 * time.Second
	DefaultFlushTimeout    = 5 * time.Second
	DefaultMaxCounters     = 5_000_000

	DefaultGlobalInterval  = 5 * time.Second
	DefaultGlobalTimeout   = 5 * time.Second
	DefaultDenialMinWindow = time.Minute
	DefaultDenialMinUsage  = 0.5
	DefaultDenialBatch     = 100
	DefaultDenialFlush     = time.Second
	DefaultCleanupEvery    = 12
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
	// (origin/redis, origin/memory, or your own). Nil means this limiter is
	// its own origin: decisions are exact for one process and nothing is
	// replayed.
	Origin origin.Origin

	// Clock is the time used for requests without a Time and for
	// housekeeping. Default: the wall clock, read for requests as one
	// monotonic clock read against a wall-clock base taken every second
	// (half the cost of time.Now), and as time.Now elsewhere.
	Clock func() time.Time

	// Logger receives the limiter's logs. Default: discard.
	Logger *slog.Logger

	// Observer receives internal measurements (origin reads, replay, cells).
	// Default: none.
	Observer Observer

	// OriginTimeout bounds every synchronous origin call: the hydration of
	// a cold counter, a freshness refresh, a strict-mode decision. On
	// timeout the decision is made from local state. Default 250ms.
	OriginTimeout time.Duration

	// OriginBackoff is how long a counter's strict-mode requests are
	// decided locally after an origin decision failed, so that a hanging
	// origin costs each counter at most one OriginTimeout per
	// OriginBackoff. Default 1s.
	OriginBackoff time.Duration

	// OriginMargin is the share of the limit near which the origin decides:
	// a request that would bring the local view above (1-OriginMargin) ×
	// limit is decided by the origin in one atomic step, as in strict mode,
	// because the local view may not have seen the other nodes' latest
	// admissions yet. It costs at most one origin call per admission in
	// that last share of each window (denials stay local). Default 0.2: at
	// 10× the limit over three nodes, 0.1 still let the first window of an
	// identity pass 1.04–1.06 × its limit, 0.2 measured 1.02–1.04 × for
	// 2–6% more origin calls. A negative value turns it off (only strict
	// mode asks the origin).
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
	// sooner; longer costs the origin fewer writes. Default 25ms (about 0.04
	// Redis commands per accepted request for a hot key at 2,000 requests/s;
	// see docs/benchmarks.md).
	ReplayInterval time.Duration

	// ReplayTicks, if set, replaces the ReplayInterval timer: the replay
	// loop runs one round per value received, and never on its own. A
	// simulation in virtual time drives replay with it, or with Flush.
	ReplayTicks <-chan time.Time

	// ReplayTimeout bounds one replay call to the origin. A failed replay
	// is sent again with backoff; a write carries the cell's whole count,
	// so one that landed is not counted twice. Default 1s.
	ReplayTimeout time.Duration

	// JanitorInterval is the period of the sweep that evicts cells older
	// than the previous window. Default 10s.
	JanitorInterval time.Duration

	// FlushTimeout bounds the final replay in Close, every call of it
	// together. Default 5s.
	FlushTimeout time.Duration

	// MaxCounters caps the window cells held in memory (a counter holds one
	// cell per active window, two across a rollover): past it, cells are
	// evicted at once, down to 90% of the cap, from the tenants over their
	// share (see MaxCountersPerWorkspace), least recently used first,
	// sparing cells in strict mode or with increments not replayed yet
	// while others can go. An evicted counter is read again from the origin
	// on its next decision (without an origin, it starts again from zero).
	// Default 5,000,000 (about 1.1 GB of heap).
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

	// Global is the store through which regions converge (global/mysql,
	// global/memory, or your own). Nil means one region: no global layer.
	// The limiter never calls it on the request path.
	Global global.Store

	// GlobalInterval paces the global layer's rounds: publish, pull and
	// denial sync. Each wait is the interval ±20%, so nodes do not write in
	// step. Default 5s.
	GlobalInterval time.Duration

	// GlobalTicks, if set, replaces the GlobalInterval timer: the loop runs
	// one round per value received, and writes denials in rounds only (not
	// every DenialFlush). A test or a simulation drives the global layer
	// with it (or calls SyncGlobal and sends nothing).
	GlobalTicks <-chan time.Time

	// GlobalTimeout bounds one round's calls to the global store. Default 5s.
	GlobalTimeout time.Duration

	// GlobalObserver receives a report per round. Default: none.
	GlobalObserver GlobalObserver

	// DisableGlobalCounters turns off the global counters (publish and
	// pull of per-region counts); DisableDenialPropagation turns off
	// denial propagation. Both mechanisms are on by default with Global.
	DisableGlobalCounters    bool
	DisableDenialPropagation bool

	// GlobalPublishShare, if set (0 < share <= 1), replaces the publication
	// rule of the global counters by a fixed share of the limit: a cell is
	// published once its count reaches share × limit. A fixed share leaves
	// a free zone (traffic spread evenly over R regions passes up to
	// R × share × limit unseen); it exists to compare with. Default 0: a
	// cell is published once its count reaches limit/(2R), R the number of
	// regions present, or once another region has published it.
	GlobalPublishShare float64

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

	// DenialFlush is the longest a denial waits before it is written.
	// Default 1s.
	DenialFlush time.Duration

	// CleanupEvery is the number of global rounds between two cleanups of
	// expired rows (one node at a time does the work). Default 12 (a
	// minute at the default interval).
	CleanupEvery int
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	setDefault(&c.OriginTimeout, DefaultOriginTimeout)
	setDefault(&c.OriginBackoff, DefaultOriginBackoff)
	setDefault(&c.OriginMargin, DefaultOriginMargin)
	setDefault(&c.RefreshAfter, DefaultRefreshAfter)
	setDefault(&c.ReplayWorkers, DefaultReplayWorkers)
	setDefault(&c.ReplayBatch, DefaultReplayBatch)
	setDefault(&c.ReplayInterval, DefaultReplayInterval)
	setDefault(&c.ReplayTimeout, DefaultReplayTimeout)
	setDefault(&c.JanitorInterval, DefaultJanitorInterval)
	setDefault(&c.FlushTimeout, DefaultFlushTimeout)
	setDefault(&c.MaxCounters, DefaultMaxCounters)
	setDefault(&c.GlobalInterval, DefaultGlobalInterval)
	setDefault(&c.GlobalTimeout, DefaultGlobalTimeout)
	setDefault(&c.DenialMinWindow, DefaultDenialMinWindow)
	setDefault(&c.DenialMinUsage, DefaultDenialMinUsage)
	setDefault(&c.DenialBatch, DefaultDenialBatch)
	setDefault(&c.DenialFlush, DefaultDenialFlush)
	setDefault(&c.CleanupEvery, DefaultCleanupEvery)
	if c.GlobalObserver == nil {
		c.GlobalObserver = NopGlobalObserver{}
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
	for _, f := range []struct {
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
		{"GlobalInterval", c.GlobalInterval < 0},
		{"GlobalTimeout", c.GlobalTimeout < 0},
		{"DenialMinWindow", c.DenialMinWindow < 0},
		{"DenialMinUsage", c.DenialMinUsage < 0},
		{"DenialBatch", c.DenialBatch < 0},
		{"DenialFlush", c.DenialFlush < 0},
		{"CleanupEvery", c.CleanupEvery < 0},
	} {
		if f.bad {
			return fmt.Errorf("%w: %s is negative", ErrInvalidConfig, f.name)
		}
	}
	if c.OriginMargin > 1 {
		return fmt.Errorf("%w: OriginMargin %v is above 1", ErrInvalidConfig, c.OriginMargin)
	}
	if c.GlobalPublishShare < 0 || c.GlobalPublishShare > 1 {
		return fmt.Errorf("%w: GlobalPublishShare %v is outside [0, 1]", ErrInvalidConfig, c.GlobalPublishShare)
	}
	if c.DenialMinUsage > 1 {
		return fmt.Errorf("%w: DenialMinUsage %v is above 1", ErrInvalidConfig, c.DenialMinUsage)
	}
	return nil
}
