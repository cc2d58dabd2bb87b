package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/origin"
)

// withdrawScript takes a writer's share out of a cell and marks the writer
// withdrawn (its field set to origin.Withdrawn).
//
//	KEYS[1]  the cell
//	ARGV[1]  the writer's hash field
//	ARGV[2]  origin.Withdrawn
//	ARGV[3]  expiry in ms of a newly created cell
//
// It returns 1 when it withdrew the writer, 0 when it was withdrawn
// already.
var withdrawScript = goredis.NewScript(`
local v = redis.call('HMGET', KEYS[1], ARGV[1], 'n')
if v[1] == ARGV[2] then return 0 end
local share, n = tonumber(v[1] or '0'), tonumber(v[2] or '0')
if share == nil or n == nil then
  return redis.error_reply('cell does not hold integers')
end
local new = redis.call('EXISTS', KEYS[1]) == 0
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], 'n', math.max(0, n - share))
if new then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
`)

// Withdraw takes writer w's share out of cell c's total and marks w
// withdrawn there, in one script call, atomic in Redis (see
// [origin.Origin]).
func (o *Origin) Withdraw(ctx context.Context, c origin.Cell, w origin.Writer) error {
	keys := []string{CellKey(c)}
	args := []any{writerField(w), origin.Withdrawn, o.ttl(c.Duration)}
	return o.do(ctx, OpApply, o.shards.route(ctx, keys[0]), 1, func(ctx context.Context) error {
		if err := runScript(ctx, o.client, withdrawScript, keys, args).Err(); err != nil {
			if classify(err) == OutcomeError {
				return fmt.Errorf("%w: %w", ErrBadValue, err) // a key that is not a Sluice cell
			}
			return err
		}
		return nil
	})
}
