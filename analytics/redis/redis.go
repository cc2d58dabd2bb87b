// Package redis shares decision analytics between the nodes of a region
// through the Redis they already share, so that any node answers for the
// region: each node publishes what changed in its analytics every second
// or so ([Region.Publish]), and an answer ([Region.Report]) merges this
// node's analytics with what the others published.
//
// Keys, under the prefix (default "sluice:analytics:") and a hash tag per
// namespace ({base64url(workspace NUL namespace)}): a hash per node and
// namespace, with a field per second ("s<unix second>": "passed denied",
// the last hour), per minute ("m<unix minute>", the last day) and per
// top-list bucket ("t<window><r|d><period>": the bucket's sketch as JSON);
// a sorted set of the nodes that published the namespace; and one sorted
// set of every namespace published. Every key expires a day and an hour
// after its last write, and a node deletes the fields that leave the
// windows, so the keys stay bounded by the nodes, the namespaces each
// tracks and the rings' lengths.
//
// The lag of a region-wide answer is the publish interval of the other
// nodes (sluice serve publishes every second). A decision counts once: a
// node rewrites its whole count of a period, never adds to it. When Redis
// fails, an answer is this node's own, and the failure is logged.
package redis

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/analytics"
)

// Defaults of [Config].
const (
	DefaultPrefix  = "sluice:analytics:"
	DefaultTimeout = time.Second
	// TTL is how long a node's analytics outlive its last publication: the
	// day of the per-minute series, and an hour.
	TTL = 25 * time.Hour
	// republish is how far back each publication reaches before the
	// previous one, for decisions applied late.
	republish = 5 * time.Second
)

// ErrInvalidConfig is returned, wrapped with the reason, by [New].
var ErrInvalidConfig = errors.New("analytics/redis: invalid config")

// Config configures a [Region].
type Config struct {
	// Client is the region's Redis (a client, a cluster client or a
	// ring). Required.
	Client goredis.UniversalClient
	// Recorder holds this node's analytics. Required.
	Recorder *analytics.Recorder
	// Node names this node among the region's; default: random, so that a
	// restarted node publishes apart from what it published before.
	Node string
	// Prefix starts every key. Default DefaultPrefix.
	Prefix string
	// Timeout bounds each Publish and each read of an answer. Default
	// DefaultTimeout.
	Timeout time.Duration
	// Logger receives Redis failures. Default: discard.
	Logger *slog.Logger
}

// Region answers analytics for the region: this node's recorder, and
// what the other nodes published. It implements server.Analytics.
type Region struct {
	cfg Config

	mu        sync.Mutex // serialises Publish
	published time.Time  // the last successful publication
}

// New returns a Region configured by cfg.
func New(cfg Config) (*Region, error) {
	switch {
	case cfg.Client == nil:
		return nil, fmt.Errorf("%w: Client is nil", ErrInvalidConfig)
	case cfg.Recorder == nil:
		return nil, fmt.Errorf("%w: Recorder is nil", ErrInvalidConfig)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("%w: Timeout is negative", ErrInvalidConfig)
	}
	if cfg.Node == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.Node = hex.EncodeToString(b[:])
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Region{cfg: cfg}, nil
}

// Record records a decision in this node's recorder.
func (r *Region) Record(workspace, namespace, identifier string, passed bool, now time.Time) {
	r.cfg.Recorder.Record(workspace, namespace, identifier, passed, now)
}

// tag is the hash tag of a namespace's keys, safe whatever its name.
func tag(k analytics.Key) string {
	return base64.RawURLEncoding.EncodeToString([]byte(k.Workspace + "\x00" + k.Namespace))
}

// untag reverses tag.
func untag(s string) (analytics.Key, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return analytics.Key{}, false
	}
	ws, ns, ok := strings.Cut(string(b), "\x00")
	return analytics.Key{Workspace: ws, Namespace: ns}, ok
}

func (r *Region) hashKey(k analytics.Key, node string) string {
	return r.cfg.Prefix + "{" + tag(k) + "}:node:" + node
}

func (r *Region) nodesKey(k analytics.Key) string { return r.cfg.Prefix + "{" + tag(k) + "}:nodes" }

func (r *Region) namespacesKey() string { return r.cfg.Prefix + "namespaces" }

// Publish writes what changed in this node's analytics since its last
// publication (and republish before it) and deletes the fields that left
// the windows. Call it every second or so; a failed publication is retried
// whole by the next.
func (r *Region) Publish(ctx context.Context, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	since := r.published.Add(-republish)
	changes := r.cfg.Recorder.Changes(since, now)
	if len(changes) == 0 {
		r.published = now
		return nil
	}
	pipe := r.cfg.Client.Pipeline()
	score := float64(now.Unix())
	oldest := fmt.Sprint(now.Add(-TTL).Unix())
	for k, p := range changes {
		h := r.hashKey(k, r.cfg.Node)
		pipe.HSet(ctx, h, encode(p))
		if !r.published.IsZero() {
			if stale := staleFields(since, now); len(stale) > 0 {
				pipe.HDel(ctx, h, stale...)
			}
		}
		pipe.Expire(ctx, h, TTL)
		pipe.ZAdd(ctx, r.nodesKey(k), goredis.Z{Score: score, Member: r.cfg.Node})
		pipe.ZRemRangeByScore(ctx, r.nodesKey(k), "-inf", "("+oldest)
		pipe.Expire(ctx, r.nodesKey(k), TTL)
		pipe.ZAdd(ctx, r.namespacesKey(), goredis.Z{Score: score, Member: tag(k)})
	}
	pipe.ZRemRangeByScore(ctx, r.namespacesKey(), "-inf", "("+oldest)
	pipe.Expire(ctx, r.namespacesKey(), TTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("analytics/redis: publish: %w", err)
	}
	r.published = now
	return nil
}

// Report answers workspace's namespace for the region: this node's
// analytics merged with what the other nodes published. If Redis fails,
// the answer is this node's own (the failure is logged).
func (r *Region) Report(workspace, namespace string, iv analytics.Interval, now time.Time) (analytics.Report, error) {
	k := analytics.Key{Workspace: workspace, Namespace: namespace}
	parts, err := r.parts(k, now)
	if err != nil {
		r.cfg.Logger.Warn("analytics: reading the other nodes' analytics from Redis failed; answering with this node's", "err", err)
		parts = nil
	}
	return r.cfg.Recorder.ReportWith(workspace, namespace, iv, now, parts)
}

// parts reads what the other nodes published of k.
func (r *Region) parts(k analytics.Key, now time.Time) ([]analytics.Part, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	nodes, err := r.cfg.Client.ZRangeByScore(ctx, r.nodesKey(k), &goredis.ZRangeBy{Min: fmt.Sprint(now.Add(-TTL).Unix()), Max: "+inf"}).Result()
	if err != nil {
		return nil, err
	}
	pipe := r.cfg.Client.Pipeline()
	var reads []*goredis.MapStringStringCmd
	for _, node := range nodes {
		if node != r.cfg.Node {
			reads = append(reads, pipe.HGetAll(ctx, r.hashKey(k, node)))
		}
	}
	if len(reads) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	parts := make([]analytics.Part, 0, len(reads))
	for _, c := range reads {
		parts = append(parts, decode(c.Val()))
	}
	return parts, nil
}

// MaxNamespaces bounds the namespaces Namespaces reads from Redis.
const MaxNamespaces = 10_000

// Namespaces returns the namespaces with analytics on this node or
// published by another in the last TTL, sorted; this node's only if Redis
// fails.
func (r *Region) Namespaces() []analytics.Key {
	local := r.cfg.Recorder.Namespaces()
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	tags, err := r.cfg.Client.ZRangeByScore(ctx, r.namespacesKey(), &goredis.ZRangeBy{
		Min: fmt.Sprint(time.Now().Add(-TTL).Unix()), Max: "+inf", Count: MaxNamespaces,
	}).Result()
	if err != nil {
		r.cfg.Logger.Warn("analytics: reading the region's namespaces from Redis failed; listing this node's", "err", err)
		return local
	}
	seen := map[analytics.Key]bool{}
	for _, k := range local {
		seen[k] = true
	}
	for _, t := range tags {
		if k, ok := untag(t); ok && !seen[k] {
			seen[k] = true
			local = append(local, k)
		}
	}
	sortKeys(local)
	return local
}
