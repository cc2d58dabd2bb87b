package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/origin"
)

// reserveScript makes a reservation's decisions (a check with a Holder)
// atomically: the writer's share is read, not raised, and what its sent
// count exceeds it by counts as spent; the admitted costs go to the
// holder's share, which must be zero (else the check is stale).
//
//	KEYS[1], KEYS[2]  the current and the previous cell (one slot)
//	ARGV[1…7]  as decideScript's
//	ARGV[8]  the holder's hash field
//	ARGV[9…] limit, cost pairs, decided in order
//
// It returns what decideScript returns (the writer's share unchanged).
var reserveScript = goredis.NewScript(`
local d = tonumber(ARGV[1])
local rem = d - tonumber(ARGV[2])
local sent = tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], ARGV[7], 'n', ARGV[8])
local share, cur, held = tonumber(v[1] or '0'), tonumber(v[2] or '0'), tonumber(v[3] or '0')
local prev = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
if share == nil or cur == nil or held == nil or prev == nil then
  return redis.error_reply('cell does not hold integers')
end
local stale = held ~= 0
` + luaWeight + `
local before = cur + math.max(0, sent - share) + tonumber(ARGV[4]) + q * rem + Q
local out = {0, prev, 0, share}
if stale then out[3] = 1 end
local add = 0
for i = 9, #ARGV, 2 do
  local limit, cost = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  if not stale and before <= limit and cost <= limit - before then
    before = before + cost
    add = add + cost
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if add > 0 then
  if cur + add > 9007199254740991 then
    return redis.error_reply('total would pass 2^53-1')
  end
  cur = cur + add
  redis.call('HSET', KEYS[1], 'n', string.format('%d', cur), ARGV[8], string.format('%d', add))
  if cur == add then redis.call('PEXPIRE', KEYS[1], ARGV[6]) end
end
out[1] = cur
return out
`)

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
	args := []any{writerField(w), origin.Withdrawn, o.ttl(c.Key.Duration)}
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
