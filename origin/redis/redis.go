package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/breaker"
	"github.com/sluicehq/sluice/origin"
)

// Errors of this package. Outage-class errors (breaker open, timeout,
// connection failure) also wrap [origin.ErrUnavailable].
var (
	// ErrClosed is returned by calls made after [Origin.Close].
	ErrClosed = errors.New("redis: origin is closed")
	// ErrInvalidCell is returned for a key whose duration is not a positive
	// whole number of milliseconds, or a sequence whose previous cell does
	// not exist (math.MinInt64). Nothing is sent to Redis.
	ErrInvalidCell = errors.New("redis: invalid cell")
	// ErrBadValue is returned when a cell key holds something that is not an
	// integer (someone else wrote it). It does not count against the breaker.
	ErrBadValue = errors.New("redis: cell does not hold an integer")
)

// A cell is a hash: field "n" holds its total and one field per writer (16
// hex digits) holds that writer's share of it (see [origin.Delta]).
const totalField = "n"

// importedField is the hash field of a cell's imported count: the other
// regions' count of it (origin.Region.Import), kept apart from its total.
const importedField = "i"

// raiseScript raises, for each cell KEYS[i], writer ARGV[3i-2]'s share to
// ARGV[3i-1] and the cell's total by as much, and returns the totals in
// order. When a cell is new (its total equals the rise) it sets the expiry
// to ARGV[3i] milliseconds. A script runs atomically, so no cell Sluice
// creates ever exists without an expiry, and a share and the total never
// disagree, even when the client dies between two steps.
//
// Each cell costs one HMGET (the share and the total), and one HSET (both
// at once) when its share rises: Redis counts two commands per raised cell
// and one per call, however many cells the call holds. A cell Redis refuses
// on its own (a key of another type, a field that is not an integer, a
// total past 2^53-1) answers a string instead of its total and changes
// nothing; the others are applied. Numbers are formatted as integers before
// they go back to Redis: totals are exact up to 2^53-1.
var raiseScript = goredis.NewScript(`local out = {}
for i = 1, #KEYS do
  local key, writer, sent = KEYS[i], ARGV[3 * i - 2], tonumber(ARGV[3 * i - 1])
  local v = redis.pcall('HMGET', key, writer, 'n', 'i')
  if v.err then
    out[i] = v.err
  else
    local old, n, imp = tonumber(v[1] or '0'), tonumber(v[2] or '0'), tonumber(v[3] or '0')
    if old == nil or n == nil or imp == nil then
      out[i] = 'cell does not hold integers'
    elseif sent <= old then
      out[i] = {n, imp}
    elseif n + (sent - old) > 9007199254740991 then
      out[i] = 'total would pass 2^53-1'
    else
      local total = n + (sent - old)
      redis.call('HSET', key, 'n', string.format('%d', total), writer, ARGV[3 * i - 1])
      if total == sent - old then
        redis.call('PEXPIRE', key, ARGV[3 * i])
      end
      out[i] = {total, imp}
    end
  end
end
return out
`)

// writerField returns the hash field of writer w: 16 lowercase hex digits.
func writerField(w origin.Writer) string {
	const hex = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = hex[w&0xf]
		w >>= 4
	}
	return string(b[:])
}

// Origin is an [origin.Origin] backed by Redis. Create it with [New]; the zero
// value is not usable. An Origin is safe for concurrent use by many
// goroutines. The goroutines it starts end with the call that started them,
// except those that load a cluster client's slot map before it has one,
// which end within Config.Timeout.
//
// Every call goes through a circuit breaker: the one breaker of a client of
// one server, or on a Redis Cluster the breaker of the master that serves
// the call's cells, so that a master that fails costs only the counters it
// serves (see [Origin.Apply] for an Apply whose cells live on several
// masters).
type Origin struct {
	client  goredis.UniversalClient
	timeout time.Duration
	minTTL  int64 // ms
	log     *slog.Logger
	obs     Observer
	shards  *shards
	tracer  trace.Tracer // nil: no spans
	closed  atomic.Bool
	keys    regionKeys // of the region's global layer
}

var _ origin.Origin = (*Origin)(nil)

// New returns an Origin for cfg, after [Config.Validate]. It does not contact
// Redis: an unreachable Redis shows up as failing calls and, if sustained, an
// open breaker.
func New(cfg Config) (*Origin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	o := &Origin{
		client:  cfg.Client,
		timeout: cfg.Timeout,
		minTTL:  cfg.MinTTL.Milliseconds(),
		log:     cfg.Logger,
		obs:     cfg.Observer,
		keys:    newRegionKeys(cfg.Region),
	}
	if cfg.TracerProvider != nil {
		o.tracer = cfg.TracerProvider.Tracer(TracerName, trace.WithSchemaURL(semconv.SchemaURL))
	}
	o.shards = newShards(cfg.Client, cfg.Timeout, cfg.Breaker, cfg.Logger, cfg.Observer)
	if ok, known := contextTimeoutEnabled(cfg.Client); known && !ok {
		o.log.Warn("redis origin: the Redis client has ContextTimeoutEnabled=false, so call deadlines do not bound socket I/O; set it to true (NewClient does)")
	}
	return o, nil
}

// readyToTrip returns the breaker's trip rule for b (defaults applied).
func readyToTrip(b BreakerConfig) func(gobreaker.Counts) bool {
	return func(c gobreaker.Counts) bool {
		if c.ConsecutiveFailures >= b.ConsecutiveFailures {
			return true
		}
		done := c.TotalSuccesses + c.TotalFailures
		return done >= b.MinRequests && float64(c.TotalFailures) >= b.FailureRatio*float64(done)
	}
}

// contextTimeoutEnabled reports the client's ContextTimeoutEnabled option, if
// the client type exposes its options.
func contextTimeoutEnabled(c goredis.UniversalClient) (enabled, known bool) {
	switch c := c.(type) {
	case *goredis.Client:
		return c.Options().ContextTimeoutEnabled, true
	case *goredis.ClusterClient:
		return c.Options().ContextTimeoutEnabled, true
	}
	return false, false
}

// Close marks the Origin closed: later calls fail with [ErrClosed] (wrapping
// origin.ErrUnavailable) without touching the network. It does not close the
// Redis client, which the caller owns, and does not wait for calls in
// flight. Close is idempotent and always returns nil.
func (o *Origin) Close() error {
	o.closed.Store(true)
	return nil
}

// Load returns the totals and imported counts of cells seq and seq-1 of
// key with two HMGETs in one pipeline (both keys share a cluster slot). A
// missing key or field counts as zero.
func (o *Origin) Load(ctx context.Context, key origin.Key, seq int64) (origin.Counts, error) {
	if err := checkKey(key); err != nil {
		return origin.Counts{}, fmt.Errorf("%w (load): %w", ErrInvalidCell, err)
	}
	if seq == math.MinInt64 {
		return origin.Counts{}, fmt.Errorf("%w (load): sequence %d has no previous cell", ErrInvalidCell, seq)
	}
	cur := CellKey(origin.Cell{Key: key, Sequence: seq})
	prev := CellKey(origin.Cell{Key: key, Sequence: seq - 1})
	var counts origin.Counts
	err := o.do(ctx, OpLoad, o.shards.route(ctx, cur), 2, func(ctx context.Context) error {
		pipe := o.client.Pipeline()
		c := pipe.HMGet(ctx, cur, totalField, importedField)
		p := pipe.HMGet(ctx, prev, totalField, importedField)
		if _, err := pipe.Exec(ctx); err != nil {
			if classify(err) == OutcomeError {
				return fmt.Errorf("%w: %w", ErrBadValue, err) // a key that is not a Sluice cell
			}
			return err
		}
		var err error
		if counts.Current, counts.Imported.Current, err = parseCounts(c); err != nil {
			return err
		}
		counts.Previous, counts.Imported.Previous, err = parseCounts(p)
		return err
	})
	if err != nil {
		return origin.Counts{}, err
	}
	return counts, nil
}

// execPipeline runs pipe; the error is the pipeline's first command error,
// which the caller inspects per command.
func execPipeline(ctx context.Context, pipe goredis.Pipeliner) error {
	_, err := pipe.Exec(ctx)
	return err
}

// ttl returns the expiry of a cell of duration d in milliseconds.
func (o *Origin) ttl(d time.Duration) int64 {
	return max(TTLWindows*d.Milliseconds(), o.minTTL)
}

// do runs fn through the circuit breaker of r with the call's deadline,
// observes and traces it, and wraps its error.
func (o *Origin) do(ctx context.Context, op Op, r route, cells int, fn func(context.Context) error) (err error) {
	if span := o.startSpan(ctx, op, r.shard.master, cells); span != nil {
		defer func() { endSpan(span, err) }()
	}
	name := string(op)
	if r.shard.master != "" {
		name += " on " + r.shard.master
	}
	if o.closed.Load() {
		return fmt.Errorf("redis: %s: %w: %w", name, ErrClosed, origin.ErrUnavailable)
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("redis: %s: %w", name, ctxErr)
	}
	start := time.Now()
	out, err := breaker.Run(ctx, r.shard.breaker, o.timeout, o.shards.wrap(r, fn), classify)
	o.obs.ObserveCall(Call{Op: op, Outcome: out, Cells: cells, Elapsed: time.Since(start), Master: r.shard.master})
	switch out {
	case OutcomeOK:
		return nil
	case OutcomeRejected:
		return fmt.Errorf("redis: %s: %w: circuit breaker is %s", name, origin.ErrUnavailable, r.shard.state())
	case OutcomeTimeout, OutcomeUnavailable:
		return fmt.Errorf("redis: %s: %w: %w", name, origin.ErrUnavailable, err)
	case OutcomeCanceled: // the client may report the cut connection, not why
		return fmt.Errorf("redis: %s: %w: %w", name, context.Cause(ctx), err)
	default:
		return fmt.Errorf("redis: %s: %w", name, err)
	}
}

// outageReplies are the prefixes of Redis error replies that mean the server
// cannot serve right now, as opposed to a problem with one command.
var outageReplies = []string{
	"LOADING", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "OOM",
	"BUSY", "NOREPLICAS", "MISCONF", "NOAUTH", "WRONGPASS", "NOPERM",
}

// classify returns the outcome of err, the failure of a call that neither
// the caller canceled nor a deadline ended (breaker.Run tells those apart).
func classify(err error) Outcome {
	if errors.Is(err, ErrBadValue) || errors.Is(err, origin.ErrCells) || errors.Is(err, origin.ErrFenced) {
		return OutcomeError // one cell's problem, or an importer's, not an outage
	}
	var re goredis.Error
	if errors.As(err, &re) {
		msg := strings.TrimPrefix(re.Error(), "ERR ")
		for _, p := range outageReplies {
			if strings.HasPrefix(msg, p) {
				return OutcomeUnavailable
			}
		}
		if strings.HasPrefix(msg, "redis: ") {
			return OutcomeUnavailable // a client-side condition, not a reply
		}
		return OutcomeError
	}
	return OutcomeUnavailable
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT"))
}

// checkKey rejects durations the key layout and the TTL cannot represent.
func checkKey(k origin.Key) error {
	if k.Duration < time.Millisecond || k.Duration%time.Millisecond != 0 {
		return fmt.Errorf("duration %v is not a positive whole number of milliseconds", k.Duration)
	}
	return nil
}

// parseCounts converts the reply of one HMGET of a cell's total and
// imported count: a missing key or field is zero.
func parseCounts(cmd *goredis.SliceCmd) (total, imported int64, err error) {
	vs, err := cmd.Result()
	if err != nil {
		return 0, 0, err
	}
	if len(vs) != 2 {
		return 0, 0, fmt.Errorf("%w: %d values for 2 fields", ErrBadValue, len(vs))
	}
	out := [2]int64{}
	for i, v := range vs {
		if v == nil {
			continue
		}
		text, _ := v.(string)
		if out[i], err = strconv.ParseInt(text, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("%w: %q", ErrBadValue, truncate(text, 32))
		}
	}
	return out[0], out[1], nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
