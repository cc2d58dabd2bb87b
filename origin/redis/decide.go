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
// script cannot decide exactly: a limit, cost or pending count of 2^53 or
// more. Nothing is sent to Redis;
// the limiter decides such a request locally. It does not count against the
// breaker.
var ErrInexact = errors.New("redis: check exceeds the exact range of a Redis script")

// maxExact is the largest integer every Lua number (a double) holds exactly.
const maxExact = 1<<53 - 1

// decideScript makes the strict-mode decisions of one counter atomically.
//
//	KEYS[1], KEYS[2]  the current and the previous cell (one slot)
//	ARGV[1]  d, the window in ms (< 2^44: a time.Duration holds no more)
//	ARGV[2]  elapsed ms into the current cell
//	ARGV[3]  pending: added to the current cell first, unconditionally
//	ARGV[4]  imported count of the current cell (other regions; never stored)
//	ARGV[5]  imported count of the previous cell
//	ARGV[6]  expiry in ms of a newly created current cell
//	ARGV[7…] limit, cost pairs, decided in order
//
// It returns {current total, previous total, admitted (0/1)…}. Redis hands
// Lua doubles, so every product that could pass 2^53 is avoided: the weight
// floor(p * rem / d) is computed as q*rem + floor(r*rem/d) with p = q*d + r,
// and the last term by binary long multiplication that keeps its remainder
// below d (so below 2^45). The result is exact for counts below 2^53, the
// range the Go side checks; imported counts are capped at 2^53-1, which
// changes no decision on limits below it.
var decideScript = goredis.NewScript(`
local d = tonumber(ARGV[1])
local rem = d - tonumber(ARGV[2])
local pending = tonumber(ARGV[3])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local prev = tonumber(redis.call('GET', KEYS[2]) or '0')
local p = prev + tonumber(ARGV[5])
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
end
local before = cur + pending + tonumber(ARGV[4]) + q * rem + Q
local add = pending
local out = {0, prev}
for i = 7, #ARGV, 2 do
  local limit, cost = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  if before <= limit and cost <= limit - before then
    before = before + cost
    add = add + cost
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if add > 0 then
  cur = redis.call('INCRBY', KEYS[1], add)
  if cur == add then redis.call('PEXPIRE', KEYS[1], ARGV[6]) end
end
out[1] = cur
return out
`)

// Decide makes the strict-mode decisions of c in one script call, atomic in
// Redis: both cells are read, the sliding window is applied to each ask in
// order, and the pending and admitted costs are added to the current cell
// with its expiry. The arithmetic is exact (see [ErrInexact] for its range).
func (o *Origin) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	if err := checkDecide(c); err != nil {
		return origin.Verdict{}, err
	}
	keys := []string{
		CellKey(origin.Cell{Key: c.Key, Sequence: c.Seq}),
		CellKey(origin.Cell{Key: c.Key, Sequence: c.Seq - 1}),
	}
	args := make([]any, 0, 6+2*len(c.Asks))
	args = append(args, c.Key.Duration.Milliseconds(), c.Elapsed, c.Pending,
		min(c.Imported.Current, maxExact), min(c.Imported.Previous, maxExact), o.ttl(c.Key.Duration))
	for _, a := range c.Asks {
		args = append(args, a.Limit, a.Cost)
	}
	var v origin.Verdict
	err := o.do(ctx, OpDecide, 2, func(ctx context.Context) error {
		res, err := decideScript.Run(ctx, o.client, keys, args...).Int64Slice()
		if err != nil {
			return err
		}
		if len(res) != 2+len(c.Asks) {
			return fmt.Errorf("%w: decide returned %d values for %d asks", ErrBadValue, len(res), len(c.Asks))
		}
		v.Counts = origin.Counts{Current: res[0], Previous: res[1]}
		v.Admitted = make([]bool, len(c.Asks))
		for i := range c.Asks {
			v.Admitted[i] = res[2+i] == 1
		}
		return nil
	})
	if err != nil {
		return origin.Verdict{}, err
	}
	return v, nil
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
	case c.Pending < 0 || c.Pending > maxExact:
		return ErrInexact
	}
	for _, a := range c.Asks {
		if a.Limit < 0 || a.Cost < 0 || a.Limit > maxExact || a.Cost > maxExact {
			return ErrInexact
		}
	}
	return nil
}
