package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// RegistryTTL is how long a node stays in the Redis registry after its last
// refresh; it refreshes every third of it.
const RegistryTTL = 60 * time.Second

// Registry is the Redis registry through which nodes find each other when
// no seed is configured: each node writes its name and gossip address with
// a TTL of RegistryTTL, refreshed while it runs, and [Registry.Discover]
// returns the live entries for [Join]; memberlist then takes over. The
// entries of a region are one sorted set scored by expiry, so the registry
// works on a Redis Cluster too.
type Registry struct {
	client goredis.UniversalClient
	key    string
	member string
	addr   string
	clock  func() time.Time
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// RegistryKey is the sorted set of region's registry.
func RegistryKey(region string) string { return "sluice:cluster:" + region + ":nodes" }

// NewRegistry registers the node name at gossip address addr in region's
// registry and keeps the entry fresh until Close. The first write happens
// before it returns.
func NewRegistry(ctx context.Context, client goredis.UniversalClient, region, name, addr string, log *slog.Logger) (*Registry, error) {
	if log == nil {
		log = slog.Default()
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &Registry{client: client, key: RegistryKey(region), member: name + "\t" + addr, addr: addr, clock: time.Now, log: log, ctx: rctx, cancel: cancel}
	if err := r.register(ctx); err != nil {
		cancel()
		return nil, err
	}
	r.wg.Go(r.refreshLoop)
	return r, nil
}

func (r *Registry) register(ctx context.Context) error {
	now := r.clock()
	expires := float64(now.Add(RegistryTTL).UnixMilli())
	pipe := r.client.TxPipeline()
	pipe.ZAdd(ctx, r.key, goredis.Z{Score: expires, Member: r.member})
	pipe.ZRemRangeByScore(ctx, r.key, "-inf", "("+strconv.FormatInt(now.UnixMilli(), 10))
	pipe.PExpire(ctx, r.key, 2*RegistryTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("cluster: registering in Redis: %w", err)
	}
	return nil
}

func (r *Registry) refreshLoop() {
	t := time.NewTicker(RegistryTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
			if err := r.register(ctx); err != nil {
				r.log.Warn("cluster: refreshing the Redis registry failed", "err", err)
			}
			cancel()
		}
	}
}

// Discover returns the gossip addresses of the live entries, this node's
// included (Join skips it).
func (r *Registry) Discover(ctx context.Context) ([]string, error) {
	now := strconv.FormatInt(r.clock().UnixMilli(), 10)
	members, err := r.client.ZRangeByScore(ctx, r.key, &goredis.ZRangeBy{Min: now, Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("cluster: reading the Redis registry: %w", err)
	}
	addrs := make([]string, 0, len(members))
	for _, m := range members {
		if _, addr, ok := strings.Cut(m, "\t"); ok {
			addrs = append(addrs, addr)
		}
	}
	return addrs, nil
}

// Close stops refreshing and removes this node's entry. It is idempotent.
func (r *Registry) Close() error {
	var err error
	r.once.Do(func() {
		r.cancel()
		r.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err = r.client.ZRem(ctx, r.key, r.member).Err()
	})
	return err
}
