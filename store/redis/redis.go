// Package redis is the Redis store of namespaces and overrides, shared by
// every node of a region (single Redis, Sentinel or Redis Cluster through
// go-redis' UniversalClient). It implements store.Store and store.Watcher:
// every write publishes a message on one channel, and a node's
// store.Cache refreshes as soon as it hears one, so a change reaches every
// node's decisions in well under a second.
//
// # Keys
//
// All keys of a workspace share one Redis Cluster hash tag, so every
// multi-key operation (the write scripts, a workspace's snapshot) stays in
// one slot:
//
//	<prefix>:{<tag>}:<len(ws)>:<ws>:ns          hash  name -> "<id> <created ms>"
//	<prefix>:{<tag>}:<len(ws)>:<ws>:nsid        hash  id -> "<created ms> <name>"
//	<prefix>:{<tag>}:<len(ws)>:<ws>:o           hash  "<len(nsid)>:<nsid>:<identifier>" -> "<id> <created ms> <updated ms> <limit> <duration ms>"
//	<prefix>:{<tag>}:<len(ws)>:<ws>:oi:<nsid>   sorted set (score 0) of the namespace's identifiers, for paging in byte order
//	<prefix>:workspaces                         set of the workspaces that have namespaces (read by Snapshot)
//	<prefix>:changes                            the pub/sub channel; a message is the changed workspace
//
// <tag> is 16 hex digits of the FNV-1a hash of the workspace, so it holds no
// brace whatever the workspace is; the workspace itself follows,
// length-prefixed, so two workspaces never share a key.
//
// # Writes
//
// Each write is one Lua script: it checks, writes every key it touches and
// publishes the change atomically. Creating a namespace first adds the
// workspace to the workspaces set (another slot, a separate command).
// Config.MaxNamespaces and Config.MaxOverrides bound what a client can grow;
// a write past a bound fails with a *store.LimitError (store.ErrLimitReached)
// and changes nothing. The scripts check the bound and write atomically, so
// racing writers never exceed it.
//
// # Outages
//
// Errors that mean Redis is unreachable (connection refused or lost,
// timeouts, outage replies such as LOADING or READONLY) wrap
// store.ErrUnavailable. After one, calls fail at once for Config.Cooldown,
// then one call probes Redis; a store.Cache meanwhile serves its last good
// copy. Watch resubscribes by itself and reports a change when it is back.
//
// # Persistence
//
// The keys have no expiry. Give Redis persistence (AOF or RDB) and a
// maxmemory policy that never evicts keys without a TTL (noeviction or a
// volatile-* policy), or a restart or eviction loses overrides.
package redis

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/store"
)

// Defaults of Config.
const (
	DefaultKeyPrefix     = "sluice"
	DefaultTimeout       = time.Second
	DefaultMaxNamespaces = 10000
	DefaultMaxOverrides  = store.DefaultMaxOverrides
	DefaultCooldown      = time.Second
)

// ErrInvalidConfig is returned, wrapped with the reason, by Config.Validate
// and New.
var ErrInvalidConfig = errors.New("store/redis: invalid config")

var validPrefix = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// Config configures the Redis store.
type Config struct {
	// Client is the Redis client. Required. The caller owns it: Store.Close
	// does not close it. It should have ContextTimeoutEnabled set (as
	// origin/redis.NewClient does) so that Timeout bounds socket I/O.
	Client goredis.UniversalClient
	// KeyPrefix starts every key and the channel name (letters, digits and
	// "_.:-", at most 64). Default DefaultKeyPrefix. Stores with different
	// prefixes on one Redis never see each other's data.
	KeyPrefix string
	// Timeout bounds each call whose context has no deadline. Default
	// DefaultTimeout (1s).
	Timeout time.Duration
	// MaxNamespaces bounds the namespaces of one workspace. Default
	// DefaultMaxNamespaces.
	MaxNamespaces int
	// MaxOverrides bounds the overrides of one namespace. Default
	// DefaultMaxOverrides.
	MaxOverrides int
	// Cooldown is how long, after a call found Redis unreachable, calls
	// fail at once with store.ErrUnavailable instead of each waiting for a
	// timeout; then one call probes Redis, and its success (or the change
	// subscription coming back) ends the cool-down. Default
	// DefaultCooldown (1s).
	Cooldown time.Duration
	// Logger receives the subscription's connection losses. Default: discard.
	Logger *slog.Logger
}

// Validate reports the first invalid field of c, wrapped in ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.Client == nil:
		return fmt.Errorf("%w: Client is nil", ErrInvalidConfig)
	case c.KeyPrefix != "" && !validPrefix.MatchString(c.KeyPrefix):
		return fmt.Errorf("%w: KeyPrefix %q is not [A-Za-z0-9_.:-]{1,64}", ErrInvalidConfig, c.KeyPrefix)
	case c.Timeout < 0:
		return fmt.Errorf("%w: Timeout %v is negative", ErrInvalidConfig, c.Timeout)
	case c.MaxNamespaces < 0:
		return fmt.Errorf("%w: MaxNamespaces is negative", ErrInvalidConfig)
	case c.MaxOverrides < 0:
		return fmt.Errorf("%w: MaxOverrides is negative", ErrInvalidConfig)
	case c.Cooldown < 0:
		return fmt.Errorf("%w: Cooldown is negative", ErrInvalidConfig)
	}
	return nil
}

// Store is the Redis implementation of store.Store and store.Watcher. It is
// safe for concurrent use and starts no goroutine of its own; Watch runs on
// its caller's.
type Store struct {
	cfg        Config
	client     goredis.UniversalClient
	workspaces string // key of the workspaces set
	channel    string
	closed     atomic.Bool
	downUntil  atomic.Int64 // end of the cool-down, Unix ns; 0 when Redis is not known to be down

	// health is how long Watch waits for a message before it pings, and
	// again for the answer before it reconnects.
	health     time.Duration
	minBackoff time.Duration
	maxBackoff time.Duration
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Watcher = (*Store)(nil)
)

// New returns a store over cfg.Client. It does not contact Redis.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxNamespaces == 0 {
		cfg.MaxNamespaces = DefaultMaxNamespaces
	}
	if cfg.MaxOverrides == 0 {
		cfg.MaxOverrides = DefaultMaxOverrides
	}
	if cfg.Cooldown == 0 {
		cfg.Cooldown = DefaultCooldown
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Store{
		cfg:        cfg,
		client:     cfg.Client,
		workspaces: cfg.KeyPrefix + ":workspaces",
		channel:    cfg.KeyPrefix + ":changes",
		health:     2 * time.Second,
		minBackoff: 50 * time.Millisecond,
		maxBackoff: 2 * time.Second,
	}, nil
}

// Channel is the pub/sub channel on which every write is announced.
func (s *Store) Channel() string { return s.channel }

// wsKeys are the keys of one workspace.
type wsKeys struct{ base string }

// keysOf returns the keys of workspace ws: <prefix>:{<tag>}:<len>:<ws>.
func (s *Store) keysOf(ws string) wsKeys {
	h := fnv.New64a()
	_, _ = io.WriteString(h, ws)
	return wsKeys{base: fmt.Sprintf("%s:{%016x}:%d:%s", s.cfg.KeyPrefix, h.Sum64(), len(ws), ws)}
}

func (k wsKeys) namespaces() string { return k.base + ":ns" }
func (k wsKeys) nsIDs() string      { return k.base + ":nsid" }
func (k wsKeys) overrides() string  { return k.base + ":o" }
func (k wsKeys) index(nsID string) string {
	return k.base + ":oi:" + nsID
}

// overrideField is the field of an override in the workspace's overrides
// hash: <len(nsid)>:<nsid>:<identifier>.
func overrideField(nsID, identifier string) string {
	return strconv.Itoa(len(nsID)) + ":" + nsID + ":" + identifier
}

// splitOverrideField is the inverse of overrideField.
func splitOverrideField(f string) (nsID, identifier string, ok bool) {
	n, rest, found := strings.Cut(f, ":")
	l, err := strconv.Atoi(n)
	if !found || err != nil || l < 0 || len(rest) < l+1 || rest[l] != ':' {
		return "", "", false
	}
	return rest[:l], rest[l+1:], true
}

// ensureScript creates namespace ARGV[1] of the workspace unless it exists.
// KEYS: ns, nsid. ARGV: name, new id, created ms, max namespaces, channel,
// workspace. Returns {0, value} when it existed, {1, value} when created,
// {-1} when the workspace is full.
var ensureScript = goredis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then return {0, v} end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return {-1} end
v = ARGV[2] .. ' ' .. ARGV[3]
redis.call('HSET', KEYS[1], ARGV[1], v)
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3] .. ' ' .. ARGV[1])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return {1, v}
`)

// setScript creates or replaces an override, keeping its id and creation
// time. KEYS: nsid, o, oi. ARGV: namespace id, field, identifier, new id,
// now ms, "<limit> <duration ms>", max overrides, channel, workspace.
// Returns {1, value}, {0} when the namespace is not the workspace's, {-1}
// when the namespace is full.
var setScript = goredis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {0} end
local old = redis.call('HGET', KEYS[2], ARGV[2])
local id, created = ARGV[4], ARGV[5]
if old then
  id, created = string.match(old, '^(%S+) (%S+) ')
elseif redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[7]) then
  return {-1}
end
local v = id .. ' ' .. created .. ' ' .. ARGV[5] .. ' ' .. ARGV[6]
redis.call('HSET', KEYS[2], ARGV[2], v)
redis.call('ZADD', KEYS[3], 0, ARGV[3])
redis.call('PUBLISH', ARGV[8], ARGV[9])
return {1, v}
`)

// deleteScript removes an override. KEYS: o, oi. ARGV: field, identifier,
// channel, workspace. Returns 1, or 0 when there was none.
var deleteScript = goredis.NewScript(`
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`)

// listScript returns up to ARGV[2] overrides of a namespace whose
// identifiers sort after ARGV[1], as {identifier, value, ...}. KEYS: oi, o.
// ARGV[3] is the field prefix <len(nsid)>:<nsid>:.
var listScript = goredis.NewScript(`
local ids = redis.call('ZRANGE', KEYS[1], '(' .. ARGV[1], '+', 'BYLEX', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local v = redis.call('HGET', KEYS[2], ARGV[3] .. id)
  if v then
    out[#out + 1] = id
    out[#out + 1] = v
  end
end
return out
`)

// errCorrupt marks a value this package did not write.
var errCorrupt = errors.New("store/redis: corrupt data")

// errCoolingDown is the cause of calls refused while Redis is known to be
// unreachable.
var errCoolingDown = errors.New("unreachable moments ago; the next probe is due shortly")

// admit refuses a call while Redis is known to be unreachable (see
// Config.Cooldown). Once the cool-down has passed, exactly one call is let
// through as a probe, and the others keep being refused until it answers.
func (s *Store) admit() error {
	for {
		until := s.downUntil.Load()
		if until == 0 {
			return nil
		}
		now := time.Now().UnixNano()
		if now < until {
			return errCoolingDown
		}
		if s.downUntil.CompareAndSwap(until, now+int64(s.cfg.Cooldown)) {
			return nil
		}
	}
}

// markDown starts a cool-down.
func (s *Store) markDown() { s.downUntil.Store(time.Now().Add(s.cfg.Cooldown).UnixNano()) }

// markUp ends a cool-down.
func (s *Store) markUp() {
	if s.downUntil.Load() != 0 {
		s.downUntil.Store(0)
	}
}

// do runs f under the configured timeout (unless ctx has a deadline) and
// the cool-down, and maps its error: results of this package
// (store.ErrNotFound, store.ErrLimitReached, corrupt data) are returned as
// they are; outage-class errors start a cool-down and wrap
// store.ErrUnavailable; anything else is wrapped with op.
func (s *Store) do(ctx context.Context, op string, f func(ctx context.Context) error) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if err := s.admit(); err != nil {
		return fmt.Errorf("store/redis: %s: %w: %w", op, store.ErrUnavailable, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
	}
	err := f(ctx)
	switch {
	case err == nil, errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrLimitReached), errors.Is(err, errCorrupt):
		s.markUp()
		return err
	case unavailable(err):
		s.markDown()
		return fmt.Errorf("store/redis: %s: %w: %w", op, store.ErrUnavailable, err)
	default:
		return fmt.Errorf("store/redis: %s: %w", op, err)
	}
}

// outageReplies are Redis error replies that mean Redis cannot serve now,
// not that the request was wrong.
var outageReplies = []string{"LOADING", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY", "NOREPLICAS", "MISCONF", "NOAUTH", "WRONGPASS", "OOM"}

// unavailable reports whether err means Redis could not be reached or could
// not serve: a timeout, a connection failure or an outage reply. A caller's
// cancellation is not an outage.
func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, goredis.ErrPoolTimeout) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var re goredis.Error
	if errors.As(err, &re) {
		msg := strings.TrimPrefix(re.Error(), "ERR ")
		for _, p := range outageReplies {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return strings.HasPrefix(msg, "redis: ") // a client-side condition (pool closed, ...), not a reply
	}
	return true // not a reply: the connection failed
}

func parseNamespace(ws, id, created, name string) (store.Namespace, error) {
	ms, err := strconv.ParseInt(created, 10, 64)
	if err != nil {
		return store.Namespace{}, fmt.Errorf("%w: namespace %q of workspace %q", errCorrupt, id, ws)
	}
	return store.Namespace{ID: id, Workspace: ws, Name: name, CreatedAt: time.UnixMilli(ms)}, nil
}

// namespaceByName parses a value of the ns hash: "<id> <created ms>".
func namespaceByName(ws, name, v string) (store.Namespace, error) {
	id, created, _ := strings.Cut(v, " ")
	return parseNamespace(ws, id, created, name)
}

// namespaceByID parses a value of the nsid hash: "<created ms> <name>".
func namespaceByID(ws, id, v string) (store.Namespace, error) {
	created, name, _ := strings.Cut(v, " ")
	return parseNamespace(ws, id, created, name)
}

// parseOverride parses a value of the overrides hash:
// "<id> <created ms> <updated ms> <limit> <duration ms>".
func parseOverride(ws, nsID, identifier, v string) (store.Override, error) {
	f := strings.Fields(v)
	if len(f) != 5 {
		return store.Override{}, fmt.Errorf("%w: override %q of workspace %q", errCorrupt, identifier, ws)
	}
	var n [4]int64
	for i, s := range f[1:] {
		x, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return store.Override{}, fmt.Errorf("%w: override %q of workspace %q", errCorrupt, identifier, ws)
		}
		n[i] = x
	}
	return store.Override{
		ID:          f[0],
		Workspace:   ws,
		NamespaceID: nsID,
		Identifier:  identifier,
		Limit:       n[2],
		Duration:    time.Duration(n[3]) * time.Millisecond,
		CreatedAt:   time.UnixMilli(n[0]),
		UpdatedAt:   time.UnixMilli(n[1]),
	}, nil
}

// status reads a script's {code, value} reply.
func status(reply any) (int64, string, error) {
	r, ok := reply.([]any)
	if !ok || len(r) == 0 {
		return 0, "", fmt.Errorf("%w: script reply %T", errCorrupt, reply)
	}
	code, ok := r[0].(int64)
	if !ok {
		return 0, "", fmt.Errorf("%w: script reply code %T", errCorrupt, r[0])
	}
	var v string
	if len(r) > 1 {
		v, _ = r[1].(string)
	}
	return code, v, nil
}

// EnsureNamespace implements store.Store. It fails with
// store.ErrLimitReached when the workspace has MaxNamespaces namespaces.
func (s *Store) EnsureNamespace(ctx context.Context, workspace, name string) (store.Namespace, error) {
	var ns store.Namespace
	err := s.do(ctx, "ensure namespace", func(ctx context.Context) error {
		if err := s.client.SAdd(ctx, s.workspaces, workspace).Err(); err != nil {
			return err
		}
		k := s.keysOf(workspace)
		reply, err := ensureScript.Run(ctx, s.client, []string{k.namespaces(), k.nsIDs()},
			name, store.NewID(store.NamespaceIDPrefix), time.Now().UnixMilli(), s.cfg.MaxNamespaces, s.channel, workspace).Result()
		if err != nil {
			return err
		}
		code, v, err := status(reply)
		switch {
		case err != nil:
			return err
		case code < 0:
			return fmt.Errorf("store/redis: ensure namespace: %w", &store.LimitError{Bound: store.BoundNamespaces, Max: s.cfg.MaxNamespaces})
		}
		ns, err = namespaceByName(workspace, name, v)
		return err
	})
	return ns, err
}

// Namespace implements store.Store: one round trip reads both the id and
// the name index.
func (s *Store) Namespace(ctx context.Context, workspace, idOrName string) (store.Namespace, error) {
	var ns store.Namespace
	err := s.do(ctx, "namespace", func(ctx context.Context) error {
		k := s.keysOf(workspace)
		pipe := s.client.Pipeline()
		byID := pipe.HGet(ctx, k.nsIDs(), idOrName)
		byName := pipe.HGet(ctx, k.namespaces(), idOrName)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
			return err
		}
		var err error
		if v, e := byID.Result(); e == nil {
			ns, err = namespaceByID(workspace, idOrName, v)
		} else if v, e := byName.Result(); e == nil {
			ns, err = namespaceByName(workspace, idOrName, v)
		} else {
			err = store.ErrNotFound
		}
		return err
	})
	return ns, err
}

// SetOverride implements store.Store. It fails with store.ErrNotFound when
// o.NamespaceID is not a namespace of o.Workspace, and with
// store.ErrLimitReached when a new override would exceed MaxOverrides.
func (s *Store) SetOverride(ctx context.Context, o store.Override) (store.Override, error) {
	var stored store.Override
	err := s.do(ctx, "set override", func(ctx context.Context) error {
		k := s.keysOf(o.Workspace)
		reply, err := setScript.Run(ctx, s.client, []string{k.nsIDs(), k.overrides(), k.index(o.NamespaceID)},
			o.NamespaceID, overrideField(o.NamespaceID, o.Identifier), o.Identifier, store.NewID(store.OverrideIDPrefix), time.Now().UnixMilli(),
			strconv.FormatInt(o.Limit, 10)+" "+strconv.FormatInt(o.Duration.Milliseconds(), 10),
			s.cfg.MaxOverrides, s.channel, o.Workspace).Result()
		if err != nil {
			return err
		}
		code, v, err := status(reply)
		switch {
		case err != nil:
			return err
		case code == 0:
			return store.ErrNotFound
		case code < 0:
			return fmt.Errorf("store/redis: set override: %w", &store.LimitError{Bound: store.BoundOverrides, Max: s.cfg.MaxOverrides})
		}
		stored, err = parseOverride(o.Workspace, o.NamespaceID, o.Identifier, v)
		return err
	})
	return stored, err
}

// Override implements store.Store.
func (s *Store) Override(ctx context.Context, workspace, namespaceID, identifier string) (store.Override, error) {
	var o store.Override
	err := s.do(ctx, "override", func(ctx context.Context) error {
		v, err := s.client.HGet(ctx, s.keysOf(workspace).overrides(), overrideField(namespaceID, identifier)).Result()
		switch {
		case errors.Is(err, goredis.Nil):
			return store.ErrNotFound
		case err != nil:
			return err
		}
		o, err = parseOverride(workspace, namespaceID, identifier, v)
		return err
	})
	return o, err
}

// ListOverrides implements store.Store, atomically (one script).
func (s *Store) ListOverrides(ctx context.Context, workspace, namespaceID, after string, limit int) ([]store.Override, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []store.Override
	err := s.do(ctx, "list overrides", func(ctx context.Context) error {
		k := s.keysOf(workspace)
		reply, err := listScript.Run(ctx, s.client, []string{k.index(namespaceID), k.overrides()},
			after, limit, overrideField(namespaceID, "")).StringSlice()
		if err != nil {
			return err
		}
		out = make([]store.Override, 0, len(reply)/2)
		for i := 0; i+1 < len(reply); i += 2 {
			o, err := parseOverride(workspace, namespaceID, reply[i], reply[i+1])
			if err != nil {
				return err
			}
			out = append(out, o)
		}
		return nil
	})
	return out, err
}

// DeleteOverride implements store.Store.
func (s *Store) DeleteOverride(ctx context.Context, workspace, namespaceID, identifier string) error {
	return s.do(ctx, "delete override", func(ctx context.Context) error {
		k := s.keysOf(workspace)
		n, err := deleteScript.Run(ctx, s.client, []string{k.overrides(), k.index(namespaceID)},
			overrideField(namespaceID, identifier), identifier, s.channel, workspace).Int64()
		switch {
		case err != nil:
			return err
		case n == 0:
			return store.ErrNotFound
		}
		return nil
	})
}

// Snapshot implements store.Store: one SMEMBERS, then one pipeline that
// reads each workspace's overrides and then its namespaces (namespaces are
// never deleted, so every override read has its namespace in the snapshot).
func (s *Store) Snapshot(ctx context.Context) (store.Snapshot, error) {
	var snap store.Snapshot
	err := s.do(ctx, "snapshot", func(ctx context.Context) error {
		wss, err := s.client.SMembers(ctx, s.workspaces).Result()
		if err != nil || len(wss) == 0 {
			return err
		}
		type reads struct{ overrides, namespaces *goredis.MapStringStringCmd }
		rs := make([]reads, len(wss))
		pipe := s.client.Pipeline()
		for i, ws := range wss {
			k := s.keysOf(ws)
			rs[i] = reads{pipe.HGetAll(ctx, k.overrides()), pipe.HGetAll(ctx, k.namespaces())}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		for i, ws := range wss {
			for name, v := range rs[i].namespaces.Val() {
				ns, err := namespaceByName(ws, name, v)
				if err != nil {
					return err
				}
				snap.Namespaces = append(snap.Namespaces, ns)
			}
			for f, v := range rs[i].overrides.Val() {
				nsID, identifier, ok := splitOverrideField(f)
				if !ok {
					return fmt.Errorf("%w: override field %q of workspace %q", errCorrupt, f, ws)
				}
				o, err := parseOverride(ws, nsID, identifier, v)
				if err != nil {
					return err
				}
				snap.Overrides = append(snap.Overrides, o)
			}
		}
		return nil
	})
	return snap, err
}

// Ping implements store.Store. It ignores a cool-down: it always asks
// Redis, and its answer ends or starts one.
func (s *Store) Ping(ctx context.Context) error {
	s.markUp()
	return s.do(ctx, "ping", func(ctx context.Context) error { return s.client.Ping(ctx).Err() })
}

// Close implements store.Store: later calls fail with store.ErrClosed. It
// does not close the client and is idempotent. A running Watch stops when
// its context is done, not on Close.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}
