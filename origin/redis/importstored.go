package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/origin"
)

var _ origin.StoredImporter = (*Origin)(nil)

// fencedReply starts the error reply of an import script called on behalf
// of a holder that does not hold the region's lease (KEYS[1] holds the
// holder's name, ARGV[1] the caller's); luaFence is the check, the first
// step of every such call, before anything is written.
const (
	fencedReply = "FENCED"
	luaFence    = `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('` + fencedReply + ` the importer does not hold the lease') end`
)

// storeScript writes known imports (see [origin.Import.Known]) without
// reading their cells: one HSET a cell of every region's entry (g:<region>),
// their sum (s) and the imported count (i), and PEXPIRE where the HSET
// added every field it wrote (a key that did not hold them: new, or
// created by a node's write). Redis counts one command a cell, and two a
// call (EVALSHA and the lease's GET), however many cells the call holds.
//
//	KEYS[1]  the lease key; KEYS[2…] the cells
//	ARGV[1]  the holder that must hold the lease
//	ARGV     from ARGV[2], for each cell in order: the expiry in ms of a
//	         new key, the number k of fields, then k pairs of a field and
//	         its value
//
// It returns 0 for each cell written and a string for a cell Redis refuses
// on its own (a key of another type), which changes nothing. A holder that
// does not hold the lease fails the call (an error reply starting with
// FENCED) before anything is written.
var storeScript = goredis.NewScript(luaFence + `
local out, a = {}, 2
for c = 2, #KEYS do
  local ttl, k = ARGV[a], tonumber(ARGV[a + 1])
  local set = {}
  for j = 1, 2 * k do set[j] = ARGV[a + 1 + j] end
  local added = redis.pcall('HSET', KEYS[c], unpack(set))
  if type(added) == 'table' and added.err then
    out[#out + 1] = added.err
  else
    if added == k then redis.call('PEXPIRE', KEYS[c], ttl) end
    out[#out + 1] = 0
  end
  a = a + 2 + 2 * k
end
return out
`)

// ImportStored imports as [Origin.Import] does, on behalf of holder (see
// [origin.StoredImporter]).
//
// On a client of one server, every script call checks that holder holds
// the region's lease, atomically with its writes (one GET a call of up to
// maxScriptCells cells): a known import is written with one HSET a cell,
// without reading it (storeScript), and the others are merged by the
// import script, which returns what each cell stores (a Read
// [origin.Stored]).
//
// On a Redis Cluster a script cannot read the lease key beside a cell's
// (they live in different slots), so ImportStored checks the lease once,
// before it imports, and merges every import as Import does, known ones
// included; no Stored is Read, so the leader never writes a cell there
// without reading it.
func (o *Origin) ImportStored(ctx context.Context, holder string, imports []origin.Import) ([]origin.Stored, error) {
	if holder == "" {
		return nil, fmt.Errorf("%w: import: a holder is required", ErrInvalidCell)
	}
	keys := make([]string, len(imports))
	for i, im := range imports {
		if err := checkKey(im.Cell.Key); err != nil {
			return nil, fmt.Errorf("%w (import %d): %w", ErrInvalidCell, i, err)
		}
		keys[i] = CellKey(im.Cell)
	}
	stored := make([]origin.Stored, len(imports))
	if len(keys) == 0 {
		return stored, nil
	}
	if _, single := o.client.(*goredis.Client); !single {
		if err := o.checkHolder(ctx, holder); err != nil {
			return nil, err
		}
		return stored, o.Import(ctx, imports)
	}
	err := o.do(ctx, OpRegion, o.shards.route(ctx, o.keys.lease), len(imports), func(ctx context.Context) error {
		calls := o.storedCalls(holder, keys, imports)
		cmds := o.runCalls(ctx, len(calls), func(p goredis.Pipeliner, j int, withSha bool) *goredis.Cmd {
			if withSha {
				return p.EvalSha(ctx, calls[j].script.Hash(), calls[j].keys, calls[j].args...)
			}
			return calls[j].script.Eval(ctx, p, calls[j].keys, calls[j].args...)
		})
		return readStored(cmds, calls, imports, stored)
	})
	if err != nil {
		return nil, err
	}
	return stored, nil
}

// checkHolder returns origin.ErrFenced unless holder holds the region's
// lease now.
func (o *Origin) checkHolder(ctx context.Context, holder string) error {
	return o.do(ctx, OpRegion, o.shards.route(ctx, o.keys.lease), 0, func(ctx context.Context) error {
		pipe := o.client.Pipeline()
		cmd := pipe.Get(ctx, o.keys.lease)
		if err := execPipeline(ctx, pipe); err != nil && !errors.Is(err, goredis.Nil) {
			return err
		}
		if cmd.Val() != holder {
			return fmt.Errorf("redis: import: %w", origin.ErrFenced)
		}
		return nil
	})
}

// A storedCall is one call of storeScript (known imports) or of
// importScript (the others), on behalf of a holder: the lease key and up
// to maxScriptCells cells, the indexes of their imports, and the
// arguments.
type storedCall struct {
	script *goredis.Script
	cells  []int
	keys   []string
	args   []any
}

// storedCalls splits imports into calls: known imports into calls of
// storeScript, the others into calls of importScript.
func (o *Origin) storedCalls(holder string, keys []string, imports []origin.Import) []storedCall {
	var calls []storedCall
	var open [2]int // the index in calls of the call being filled, +1, per script
	for i, im := range imports {
		kind, script := 0, importScript
		if im.Known {
			kind, script = 1, storeScript
		}
		if open[kind] == 0 || len(calls[open[kind]-1].cells) == maxScriptCells {
			calls = append(calls, storedCall{script: script, keys: []string{o.keys.lease}, args: []any{holder}})
			open[kind] = len(calls)
		}
		c := &calls[open[kind]-1]
		c.cells = append(c.cells, i)
		c.keys = append(c.keys, keys[i])
		if im.Known {
			c.args = appendStoreArgs(c.args, im, o.ttl(im.Cell.Duration))
		} else {
			c.args = appendImportArgs(c.args, im, o.ttl(im.Cell.Duration))
		}
	}
	return calls
}

// appendStoreArgs appends storeScript's arguments for the known import
// im: every region's entry, their sum and the imported count.
func appendStoreArgs(args []any, im origin.Import, ttl int64) []any {
	var sum int64
	args = append(args, ttl, len(im.Counts)+2)
	for _, rc := range im.Counts {
		args = append(args, "g:"+rc.Region, rc.Count)
		sum += rc.Count
	}
	return append(args, "s", sum, importedField, im.Imported)
}

// readStored reads the replies of calls into stored: what the import
// script returns of each cell it merged. A call Redis failed fails the
// whole (origin.ErrFenced for a holder that does not hold the lease); a
// cell Redis refused on its own fails alone, the error naming the first
// (ErrBadValue).
func readStored(cmds []*goredis.Cmd, calls []storedCall, imports []origin.Import, stored []origin.Stored) error {
	var refused error
	for j, cmd := range cmds {
		replies, err := cmd.Slice()
		if err != nil {
			if strings.HasPrefix(err.Error(), fencedReply) {
				return fmt.Errorf("redis: import: %w", origin.ErrFenced)
			}
			return err
		}
		if len(replies) != len(calls[j].cells) {
			return fmt.Errorf("%w: import: %d replies for %d cells", ErrBadValue, len(replies), len(calls[j].cells))
		}
		for r, v := range replies {
			i := calls[j].cells[r]
			if msg, ok := v.(string); ok {
				if refused == nil {
					refused = fmt.Errorf("%w: import %d: %s", ErrBadValue, i, truncate(msg, 64))
				}
				continue
			}
			if calls[j].script != importScript {
				continue
			}
			st, ok := parseStored(v, imports[i])
			if !ok {
				return fmt.Errorf("%w: import %d: an unexpected reply", ErrBadValue, i)
			}
			stored[i] = st
		}
	}
	return refused
}

// parseStored reads the import script's reply for im's cell: {s, i, and
// the entry of each of im's regions}.
func parseStored(v any, im origin.Import) (origin.Stored, bool) {
	vs, ok := v.([]any)
	if !ok || len(vs) != 2+len(im.Counts) {
		return origin.Stored{}, false
	}
	n := make([]int64, len(vs))
	for k, x := range vs {
		if n[k], ok = x.(int64); !ok {
			return origin.Stored{}, false
		}
	}
	st := origin.Stored{Read: true, Sum: n[0], Imported: n[1], Counts: make([]origin.RegionCount, len(im.Counts))}
	for k, rc := range im.Counts {
		st.Counts[k] = origin.RegionCount{Region: rc.Region, Count: n[2+k]}
	}
	return st, true
}
