package redis

import (
	"context"
	"errors"
	"fmt"
	"math"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/origin"
)

// ErrInexact is returned by [Origin.Decide] for a check whose numbers the
// script cannot decide exactly: a limit, cost or sent count of 2^53 or
// more. Nothing is sent to Redis;
// the limiter decides such a request locally. It does not count against the
// breaker.
var ErrInexact = errors.New("redis: check exceeds the exact range of a Redis script")

// maxExact is the largest integer every Lua number (a double) holds exactly.
const maxExact = 1<<53 - 1

// luaWeight is the weight of the previous cell in a decision script, from
// prev (its total), pimp (its imported count), ARGV[1] (d) and rem
// (d − elapsed): floor((prev + imported) * rem / d) = q*rem + Q, computed
// without a product above 2^53 (see decideScript).
const luaWeight = `local p = prev + pimp
local q = math.floor(p / d)
local r = p - q * d
if r < 0 then q = q - 1; r = r + d elseif r >= d then q = q + 1; r = r - d end
local Q, R = 0, 0
local b = 1
while b * 2 <= rem do b = b * 2 end
local left = rem
while b >= 1 do
  Q = Q * 2; R = R * 2
  if R >= d then R = R - d; Q = Q + 1 end
  if left >= b then
    left = left - b
    R = R + r
    if R >= d then R = R - d; Q = Q + 1 end
  end
  b = b / 2
end`

// decideScript makes the strict-mode decisions of one counter atomically.
//
//	KEYS[1], KEYS[2]  the current and the previous cell (one slot)
//	ARGV[1]  d, the window in ms (< 2^44: a time.Duration holds no more)
//	ARGV[2]  elapsed ms into the current cell
//	ARGV[3]  sent: the writer's count of the current cell
//	ARGV[4]  imported count of the current cell (other regions; never stored)
//	ARGV[5]  imported count of the previous cell
//	ARGV[6]  expiry in ms of a newly created current cell
//	ARGV[7]  the writer's hash field
//	ARGV[8]  the holder's hash field of a reservation, or "" (see below)
//	ARGV[9…] limit, cost pairs, decided in order
//
// It returns {current total, previous total, stale (0/1), the writer's
// share, the current and previous cells' stored imported counts, admitted
// (0/1)…}. The decision counts ARGV[4..5], the caller's view, not the
// stored imported counts, which it only returns. It reads the current cell with one HMGET (the writer's
// share, the total, the holder's share and the imported count) and the
// previous one with another, and writes with one HSET when it admits or raises
// anything: Redis counts 3 commands, 4 with a write (5 for a new cell).
//
// Without a holder, the writer's share is raised to sent first, and the
// admitted costs are added to it; a check whose writer's share is above
// its sent count is stale and admits nothing (see [origin.Origin]). With a
// holder (a batch's reservation), the writer's share is read, not raised:
// what sent exceeds it by counts as spent; the admitted costs go to the
// holder's share, and a holder whose share is not zero (written or
// withdrawn already) makes the check stale.
//
// Redis hands Lua doubles, so every product that could pass 2^53 is
// avoided: the weight floor(p * rem / d) is computed as q*rem +
// floor(r*rem/d) with p = q*d + r, and the last term by binary long
// multiplication that keeps its remainder below d (so below 2^45). The
// result is exact for counts below 2^53, the range the Go side checks;
// imported counts are capped at 2^53-1, which changes no decision on
// limits below it.
var decideScript = goredis.NewScript(`
local d = tonumber(ARGV[1])
local rem = d - tonumber(ARGV[2])
local sent = tonumber(ARGV[3])
local holder = ARGV[8]
local keeper = ARGV[7]
if holder ~= '' then keeper = holder end
local v = redis.call('HMGET', KEYS[1], ARGV[7], 'n', keeper, 'i')
local share, cur, kept = tonumber(v[1] or '0'), tonumber(v[2] or '0'), tonumber(v[3] or '0')
local cimp = tonumber(v[4] or '0')
local pv = redis.call('HMGET', KEYS[2], 'n', 'i')
local prev, pimp = tonumber(pv[1] or '0'), tonumber(pv[2] or '0')
if share == nil or cur == nil or kept == nil or prev == nil or cimp == nil or pimp == nil then
  return redis.error_reply('cell does not hold integers')
end
local storedc, storedp = cimp, pimp
cimp, pimp = tonumber(ARGV[4]), tonumber(ARGV[5])
local stale, add, unsent = false, 0, 0
if holder == '' then
  stale = share > sent
  if sent > share then
    add = sent - share
    share = sent
  end
  kept = share
else
  stale = kept ~= 0
  unsent = math.max(0, sent - share)
end
` + luaWeight + `
local before = cur + add + unsent + cimp + q * rem + Q
local out = {0, prev, 0, 0, storedc, storedp}
if stale then out[3] = 1 end
for i = 9, #ARGV, 2 do
  local limit, cost = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  if not stale and before <= limit and cost <= limit - before then
    before = before + cost
    add = add + cost
    kept = kept + cost
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if holder == '' then share = kept end
if add > 0 then
  if cur + add > 9007199254740991 then
    return redis.error_reply('total would pass 2^53-1')
  end
  cur = cur + add
  redis.call('HSET', KEYS[1], 'n', string.format('%d', cur), keeper, string.format('%d', kept))
  if cur == add then redis.call('PEXPIRE', KEYS[1], ARGV[6]) end
end
out[1] = cur
out[4] = share
return out
`)

// Decide makes the strict-mode decisions of c in one script call, atomic in
// Redis: both cells are read, the sliding window is applied to each ask in
// order, and the writer's share is raised to its sent count and the
// admitted costs are added to it and to the current cell, with its expiry;
// for a reservation (c.Holder set), to the holder's share instead, the
// writer's share only read (see [origin.Check]). The arithmetic is exact
// (see [ErrInexact] for its range).
func (o *Origin) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	if err := checkDecide(c); err != nil {
		return origin.Verdict{}, err
	}
	keys := []string{
		CellKey(origin.Cell{Key: c.Key, Sequence: c.Seq}),
		CellKey(origin.Cell{Key: c.Key, Sequence: c.Seq - 1}),
	}
	args := make([]any, 0, 8+2*len(c.Asks))
	args = append(args, c.Key.Duration.Milliseconds(), c.Elapsed, c.Sent,
		min(c.Imported.Current, maxExact), min(c.Imported.Previous, maxExact), o.ttl(c.Key.Duration),
		writerField(c.Writer))
	holder := ""
	if c.Holder != 0 {
		holder = writerField(c.Holder)
	}
	args = append(args, holder)
	for _, a := range c.Asks {
		args = append(args, a.Limit, a.Cost)
	}
	var v origin.Verdict
	err := o.do(ctx, OpDecide, o.shards.route(ctx, keys[0]), 2, func(ctx context.Context) error {
		res, err := runScript(ctx, o.client, decideScript, keys, args).Int64Slice()
		if err != nil {
			if classify(err) == OutcomeError {
				return fmt.Errorf("%w: %w", ErrBadValue, err) // a key that is not a Sluice cell
			}
			return err
		}
		if len(res) != 6+len(c.Asks) {
			return fmt.Errorf("%w: decide returned %d values for %d asks", ErrBadValue, len(res), len(c.Asks))
		}
		v.Counts = origin.Counts{Current: res[0], Previous: res[1], Imported: origin.Imported{Current: res[4], Previous: res[5]}}
		v.Stale, v.Share = res[2] == 1, res[3]
		v.Admitted = make([]bool, len(c.Asks))
		for i := range c.Asks {
			v.Admitted[i] = res[6+i] == 1
		}
		return nil
	})
	if err != nil {
		return origin.Verdict{}, err
	}
	return v, nil
}

// runScript runs script on keys with EVALSHA, and again with EVAL if Redis
// answers NOSCRIPT, each in a pipeline of its own. A pipeline, not a plain
// command: a Redis Cluster client routes a pipeline from its slot map in
// memory, while a plain command first needs the cluster's command table,
// which the client loads under a lock from one node after another, beyond
// the call's deadline: a frozen node would hold every call on it for
// seconds until it loaded.
func runScript(ctx context.Context, c goredis.UniversalClient, script *goredis.Script, keys []string, args []any) *goredis.Cmd {
	pipe := c.Pipeline()
	cmd := script.EvalSha(ctx, pipe, keys, args...)
	_ = execPipeline(ctx, pipe) // the command's error is the caller's
	if isNoScript(cmd.Err()) {
		pipe = c.Pipeline()
		cmd = script.Eval(ctx, pipe, keys, args...)
		_ = execPipeline(ctx, pipe)
	}
	return cmd
}

// checkDecide rejects a check the script cannot take or decide exactly.
func checkDecide(c origin.Check) error {
	if err := checkKey(c.Key); err != nil {
		return fmt.Errorf("%w (decide): %w", ErrInvalidCell, err)
	}
	d := c.Key.Duration.Milliseconds() // < 2^44, well inside the exact range
	switch {
	case c.Seq == math.MinInt64:
		return fmt.Errorf("%w (decide): sequence %d has no previous cell", ErrInvalidCell, c.Seq)
	case c.Elapsed < 0 || c.Elapsed >= d:
		return fmt.Errorf("%w (decide): elapsed %d outside [0, %d)", ErrInvalidCell, c.Elapsed, d)
	case c.Sent < 0 || c.Sent > maxExact:
		return ErrInexact
	}
	for _, a := range c.Asks {
		if a.Limit < 0 || a.Cost < 0 || a.Limit > maxExact || a.Cost > maxExact {
			return ErrInexact
		}
	}
	return nil
}
