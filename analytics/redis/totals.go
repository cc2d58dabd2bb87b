package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/analytics"
)

// Totals returns the region's passed and denied decisions of each of keys
// over the last hour ending at now (the minutes of analytics.TotalsSpan):
// this node's, and the minute fields the other nodes published. It makes
// two pipelined reads, the nodes of every key and then TotalsMinutes
// fields of each of their hashes: the caller bounds keys. If Redis fails,
// the totals are this node's own (the failure is logged).
func (r *Region) Totals(keys []analytics.Key, now time.Time) []analytics.Counts {
	out := r.cfg.Recorder.Totals(keys, now)
	if len(keys) == 0 {
		return out
	}
	others, err := r.otherTotals(keys, now)
	if err != nil {
		r.cfg.Logger.Warn("analytics: reading the other nodes' totals from Redis failed; answering with this node's", "err", err)
		return out
	}
	for i, c := range others {
		out[i].Passed += c.Passed
		out[i].Denied += c.Denied
	}
	return out
}

// otherTotals reads what the other nodes published of keys' last hour.
func (r *Region) otherTotals(keys []analytics.Key, now time.Time) ([]analytics.Counts, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	defer cancel()
	pipe := r.cfg.Client.Pipeline()
	nodes := make([]*goredis.StringSliceCmd, len(keys))
	for i, k := range keys {
		nodes[i] = pipe.ZRangeByScore(ctx, r.nodesKey(k), &goredis.ZRangeBy{Min: fmt.Sprint(now.Add(-TTL).Unix()), Max: "+inf"})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("analytics/redis: reading the nodes of %d namespaces: %w", len(keys), err)
	}
	first, last := analytics.TotalsSpan(now)
	fields := make([]string, 0, last-first+1)
	for m := first; m <= last; m++ {
		fields = append(fields, "m"+strconv.FormatInt(m, 10))
	}
	type read struct {
		key int
		cmd *goredis.SliceCmd
	}
	var reads []read
	pipe = r.cfg.Client.Pipeline()
	for i, k := range keys {
		for _, node := range nodes[i].Val() {
			if node != r.cfg.Node {
				reads = append(reads, read{i, pipe.HMGet(ctx, r.hashKey(k, node), fields...)})
			}
		}
	}
	out := make([]analytics.Counts, len(keys))
	if len(reads) == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("analytics/redis: reading the totals of %d hashes: %w", len(reads), err)
	}
	for _, rd := range reads {
		for _, v := range rd.cmd.Val() {
			if s, ok := v.(string); ok {
				if c, ok := parseCounts(s); ok {
					out[rd.key].Passed += c.Passed
					out[rd.key].Denied += c.Denied
				}
			}
		}
	}
	return out, nil
}
