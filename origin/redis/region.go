package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/origin"
)

// MaxNominations is the most nominations the region's queue holds (see
// [origin.Region.Nominate]); past it the oldest are dropped.
const MaxNominations = 1 << 20

// regionKeys are the keys of a region's global layer:
//
//	sl2:{global}:<len(region)>:<region>:lease   the holder, expiring with the lease
//	sl2:{global}:<len(region)>:<region>:term    fence, since, regions, cursors
//	sl2:{global}:<len(region)>:<region>:outbox  the queue of nominations
//
// They share one hash tag, so that a Redis Cluster serves them from one
// slot, and hold the region's name length-prefixed, so that no two names
// share a key.
type regionKeys struct{ lease, term, outbox string }

func newRegionKeys(region string) regionKeys {
	if region == "" {
		region = "default"
	}
	base := KeyPrefix + ":{global}:" + strconv.Itoa(len(region)) + ":" + region + ":"
	return regionKeys{lease: base + "lease", term: base + "term", outbox: base + "outbox"}
}

// termTTL is how long the term's state outlives the last lease: long
// enough for any outage of the leaders, short enough not to stay forever.
const termTTL = 7 * 24 * time.Hour

var _ origin.Region = (*Origin)(nil)

// leadScript takes or renews the lease (see [origin.Region.Lead]).
//
//	KEYS[1]  the lease key, KEYS[2] the term key (see regionKeys)
//	ARGV[1]  holder, ARGV[2] TTL in ms, ARGV[3] regions,
//	ARGV[4]  counts cursor, ARGV[5] denials cursor, ARGV[6] termTTL in ms
//
// It returns {held (0/1), holder, fence, since, regions, counts cursor,
// denials cursor}. The lease's start is Redis's own clock (TIME), so two
// holders never hold it at once by that clock. The term's expiry is pushed
// back only once half of it has passed, not at every renewal.
var leadScript = goredis.NewScript(`
local holder = redis.call('GET', KEYS[1])
local held = 0
if not holder or holder == ARGV[1] then
  held = 1
  if holder then
    redis.call('HSET', KEYS[2], 'regions', ARGV[3], 'c', ARGV[4], 'd', ARGV[5])
  else
    local t = redis.call('TIME')
    redis.call('HINCRBY', KEYS[2], 'fence', 1)
    redis.call('HSET', KEYS[2], 'since', string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000)))
    holder = ARGV[1]
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if redis.call('PTTL', KEYS[2]) < ARGV[6] / 2 then redis.call('PEXPIRE', KEYS[2], ARGV[6]) end
end
local h = redis.call('HMGET', KEYS[2], 'fence', 'since', 'regions', 'c', 'd')
return {held, holder, h[1] or '0', h[2] or '0', h[3] or '0', h[4] or '0', h[5] or '0'}
`)

// Lead takes or renews the region's lease in one script call, atomic in
// Redis (see [origin.Region]).
func (o *Origin) Lead(ctx context.Context, r origin.LeaseRequest) (origin.Lease, error) {
	if r.Holder == "" || r.TTL < time.Millisecond {
		return origin.Lease{}, fmt.Errorf("%w: lead: a holder and a TTL of 1ms or more are required", ErrInvalidCell)
	}
	keys := []string{o.keys.lease, o.keys.term}
	args := []any{r.Holder, r.TTL.Milliseconds(), r.Regions, r.Cursors.Counts, r.Cursors.Denials, termTTL.Milliseconds()}
	var l origin.Lease
	err := o.do(ctx, OpRegion, o.shards.route(ctx, o.keys.lease), 0, func(ctx context.Context) error {
		res, err := runScript(ctx, o.client, leadScript, keys, args).Slice()
		if err != nil {
			return err
		}
		l, err = parseLease(res)
		return err
	})
	return l, err
}

// parseLease reads the reply of leadScript.
func parseLease(res []any) (origin.Lease, error) {
	if len(res) != 7 {
		return origin.Lease{}, fmt.Errorf("%w: lead returned %d values", ErrBadValue, len(res))
	}
	held, _ := res[0].(int64)
	holder, _ := res[1].(string)
	var n [5]int64
	for i := range n {
		text, _ := res[2+i].(string)
		v, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return origin.Lease{}, fmt.Errorf("%w: lease field %q", ErrBadValue, truncate(text, 32))
		}
		n[i] = v
	}
	return origin.Lease{Held: held == 1, Holder: holder, Fence: n[0], Since: n[1], Regions: int(n[2]),
		Cursors: origin.Cursors{Counts: n[3], Denials: n[4]}}, nil
}

// Nominate appends ns to the region's queue and trims it to its newest
// [MaxNominations], in one pipeline.
func (o *Origin) Nominate(ctx context.Context, ns []origin.Nomination) error {
	if len(ns) == 0 {
		return nil
	}
	items := make([]any, len(ns))
	for i, n := range ns {
		items[i] = encodeNomination(n)
	}
	return o.do(ctx, OpRegion, o.shards.route(ctx, o.keys.outbox), 0, func(ctx context.Context) error {
		pipe := o.client.Pipeline()
		pipe.RPush(ctx, o.keys.outbox, items...)
		pipe.LTrim(ctx, o.keys.outbox, -MaxNominations, -1)
		return execPipeline(ctx, pipe)
	})
}

// Nominated pops up to max nominations from the region's queue, oldest
// first. An entry that does not decode (written by another version) is
// skipped.
func (o *Origin) Nominated(ctx context.Context, max int) ([]origin.Nomination, error) {
	if max <= 0 {
		return nil, nil
	}
	var out []origin.Nomination
	err := o.do(ctx, OpRegion, o.shards.route(ctx, o.keys.outbox), 0, func(ctx context.Context) error {
		pipe := o.client.Pipeline()
		cmd := pipe.LPopCount(ctx, o.keys.outbox, max)
		if err := execPipeline(ctx, pipe); err != nil && !errors.Is(err, goredis.Nil) {
			return err
		}
		items, err := cmd.Result()
		if errors.Is(err, goredis.Nil) {
			return nil
		}
		for _, it := range items {
			if n, ok := decodeNomination(it); ok {
				out = append(out, n)
			}
		}
		return err
	})
	return out, err
}

// importScript raises the imported count of each cell (see
// [origin.Import]). Each other region's entry of a cell is field
// g:<region>, their sum field s, and the imported count field i: the
// highest of i, s and the usage less the regional total n. Each cell costs
// one HMGET of its fields and, when something rose, one HSET (and PEXPIRE
// where it creates the key): Redis counts two commands a cell and one a
// call, however many cells the call holds, and one more (GET) for a call
// that checks the lease.
//
//	ARGV[1]  the holder that must hold the region's lease, or "" for no
//	         check; with a holder, KEYS[1] is the lease key
//	KEYS[c]  the cells, after the lease key if any
//	ARGV     from ARGV[2], for each cell in order: its usage, the expiry in
//	         ms of a new key, the number k of regions, then k pairs of a
//	         region and its count
//
// It returns, for each cell imported (or left as it was), what the cell
// stores after it: {s, i, and the entry of each of the k regions}; and a
// string for a cell Redis refuses on its own (a key of another type, a
// field that is not an integer), which changes nothing; the others are
// imported. A holder that does not hold the lease fails the call (an error
// reply starting with FENCED) before anything is written.
var importScript = goredis.NewScript(`
local first = 1
if ARGV[1] ~= '' then
  ` + luaFence + `
  first = 2
end
local out, a = {}, 2
for c = first, #KEYS do
  local usage, ttl, k = tonumber(ARGV[a]), ARGV[a + 1], tonumber(ARGV[a + 2])
  local fields = {'n', 'i', 's'}
  for j = 0, k - 1 do fields[#fields + 1] = 'g:' .. ARGV[a + 3 + 2 * j] end
  local v = redis.pcall('HMGET', KEYS[c], unpack(fields))
  if v.err then
    out[#out + 1] = v.err
  else
    local n, imp, sum = tonumber(v[1] or '0'), tonumber(v[2] or '0'), tonumber(v[3] or '0')
    local fresh, set, bad = not v[1] and not v[2] and not v[3], {}, n == nil or imp == nil or sum == nil
    local entries = {}
    for j = 0, k - 1 do
      if bad then break end
      local old, new = tonumber(v[4 + j] or '0'), tonumber(ARGV[a + 4 + 2 * j])
      if old == nil then
        bad = true
      elseif new > old then
        set[#set + 1], set[#set + 2] = fields[4 + j], ARGV[a + 4 + 2 * j]
        sum = sum + new - old
        entries[j + 1] = new
      else
        entries[j + 1] = old
      end
    end
    if bad then
      out[#out + 1] = 'cell does not hold integers'
    else
      if #set > 0 then set[#set + 1], set[#set + 2] = 's', string.format('%d', sum) end
      local want = math.min(math.max(imp, sum, usage - n), 9007199254740991)
      if want > imp then
        set[#set + 1], set[#set + 2] = 'i', string.format('%d', want)
        imp = want
      end
      if #set > 0 then
        redis.call('HSET', KEYS[c], unpack(set))
        if fresh then redis.call('PEXPIRE', KEYS[c], ttl) end
      end
      local r = {sum, imp}
      for j = 1, k do r[2 + j] = entries[j] end
      out[#out + 1] = r
    end
  end
  a = a + 3 + 2 * k
end
return out
`)

// appendImportArgs appends importScript's arguments for im.
func appendImportArgs(args []any, im origin.Import, ttl int64) []any {
	args = append(args, im.Usage, ttl, len(im.Counts))
	for _, c := range im.Counts {
		args = append(args, c.Region, c.Count)
	}
	return args
}

// Import raises each import's cell's imported count with the import
// script, in one pipeline per master (see [origin.Region]): calls of up to
// maxScriptCells cells on a client of one server, one call per cell on a
// Redis Cluster. A master that fails fails its cells alone, and a cell
// Redis refuses on its own (ErrBadValue) fails alone: the error names the
// first failure and the others are imported.
func (o *Origin) Import(ctx context.Context, imports []origin.Import) error {
	keys := make([]string, len(imports))
	for i, im := range imports {
		if err := checkKey(im.Cell.Key); err != nil {
			return fmt.Errorf("%w (import %d): %w", ErrInvalidCell, i, err)
		}
		keys[i] = CellKey(im.Cell)
	}
	if len(keys) == 0 {
		return nil
	}
	groups := o.groups(ctx, keys)
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for gi, g := range groups {
		wg.Go(func() {
			errs[gi] = o.do(ctx, OpRegion, g.route, len(g.cells), func(ctx context.Context) error {
				return o.importCells(ctx, g.cells, keys, imports)
			})
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// importCells runs importScript on the cells of one group, all its calls
// in one pipeline (see runCalls).
func (o *Origin) importCells(ctx context.Context, cells []int, keys []string, imports []origin.Import) error {
	per := 1
	if _, single := o.client.(*goredis.Client); single {
		per = maxScriptCells
	}
	calls := make([]struct {
		keys []string
		args []any
	}, (len(cells)+per-1)/per)
	for j, i := range cells {
		call := &calls[j/per]
		if call.args == nil {
			call.args = []any{""} // no holder: Import does not check the lease
		}
		call.keys = append(call.keys, keys[i])
		call.args = appendImportArgs(call.args, imports[i], o.ttl(imports[i].Cell.Duration))
	}
	send := func(p goredis.Pipeliner, j int, withSha bool) *goredis.Cmd {
		if withSha {
			return p.EvalSha(ctx, importScript.Hash(), calls[j].keys, calls[j].args...)
		}
		return importScript.Eval(ctx, p, calls[j].keys, calls[j].args...)
	}
	return importRefusals(o.runCalls(ctx, len(calls), send), cells, per)
}

// importRefusals returns the first failure among the import script's
// replies: a call's error, or a cell the script refused (ErrBadValue,
// named by its index in the Import).
func importRefusals(cmds []*goredis.Cmd, cells []int, per int) error {
	for j, c := range cmds {
		replies, err := c.Slice()
		if err != nil {
			return err
		}
		for r, v := range replies {
			if msg, refused := v.(string); refused {
				return fmt.Errorf("%w: import %d: %s", ErrBadValue, cells[j*per+r], truncate(msg, 64))
			}
		}
	}
	return nil
}

// encodeNomination encodes n as
//
//	<seq>:<duration ms>:<count>:<limit>:<usage>:<len>:<ws><len>:<ns><len>:<id>
//
// length-prefixed, so that any bytes in the strings decode back.
func encodeNomination(n origin.Nomination) string {
	b := make([]byte, 0, 64+len(n.Cell.Workspace)+len(n.Cell.Namespace)+len(n.Cell.Identifier))
	for _, v := range []int64{n.Cell.Sequence, n.Cell.Duration.Milliseconds(), n.Count, n.Limit, n.Usage} {
		b = strconv.AppendInt(b, v, 10)
		b = append(b, ':')
	}
	for _, s := range []string{n.Cell.Workspace, n.Cell.Namespace, n.Cell.Identifier} {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	return string(b)
}

// decodeNomination decodes what encodeNomination encoded.
func decodeNomination(s string) (origin.Nomination, bool) {
	var v [5]int64
	for i := range v {
		j := strings.IndexByte(s, ':')
		n, err := strconv.ParseInt(s[:max(j, 0)], 10, 64)
		if j < 0 || err != nil {
			return origin.Nomination{}, false
		}
		v[i], s = n, s[j+1:]
	}
	var str [3]string
	for i := range str {
		j := strings.IndexByte(s, ':')
		n, err := strconv.Atoi(s[:max(j, 0)])
		if j < 0 || err != nil || n < 0 || n > len(s)-j-1 {
			return origin.Nomination{}, false
		}
		str[i], s = s[j+1:j+1+n], s[j+1+n:]
	}
	if s != "" || v[1] <= 0 {
		return origin.Nomination{}, false
	}
	key := origin.Key{Workspace: str[0], Namespace: str[1], Identifier: str[2], Duration: time.Duration(v[1]) * time.Millisecond}
	return origin.Nomination{Cell: origin.Cell{Key: key, Sequence: v[0]}, Count: v[2], Limit: v[3], Usage: v[4]}, true
}
