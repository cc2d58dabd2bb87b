package sim

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/redis"
)

// Costs are what a run's deployment spends, as the production backends
// would count them: the calls to the shared origin as Redis commands (the
// way INFO commandstats counts them, the commands a script runs included),
// the peer RPCs of cluster mode, the statements and rows of the global
// layer's MySQL store, and the memory of the nodes' counters.
type Costs struct {
	// RedisCallsPerRequest is the Redis commands the nodes' origin calls
	// would run, divided by the requests (shared origin; 0 in cluster
	// mode). RedisCallsPerSecond is the same per second of virtual time.
	RedisCallsPerRequest float64 `json:"redis_calls_per_request"`
	RedisCallsPerSecond  float64 `json:"redis_calls_per_second"`
	// RedisCallsByCall splits RedisCallsPerRequest by the origin call
	// whose commands they are.
	RedisCallsByCall RedisSplit `json:"redis_calls_per_request_by_call"`
	// RedisKeysWrittenPerRequest is the distinct cells the nodes wrote to
	// their region's origin (a Redis key each: an identity's window in a
	// region), divided by the requests: a floor under the Redis commands
	// per request of any regional store that keeps a key per identity and
	// window, since writing a key takes at least one command (shared
	// origin; 0 in cluster mode).
	RedisKeysWrittenPerRequest float64 `json:"redis_keys_written_per_request"`
	// PeerCallsPerRequest is the peer RPCs per request (cluster mode).
	PeerCallsPerRequest float64 `json:"peer_calls_per_request"`
	// MySQLRowsPerSecond and MySQLStatementsPerSecond are the rows the
	// global layer writes and the statements it runs, in all regions, per
	// second of virtual time (0 with one region).
	MySQLRowsPerSecond       float64 `json:"mysql_rows_per_second"`
	MySQLStatementsPerSecond float64 `json:"mysql_statements_per_second"`
	// OriginBytesPerNodePerSecond is what a node sends its origin, on
	// average: the Redis protocol's bytes of its commands (shared origin).
	OriginBytesPerNodePerSecond float64 `json:"origin_bytes_per_node_per_second"`
	// CellsPerNode is the most counter cells one node held at a replay
	// round. LeaderHeapBytes is the most memory a region's leader kept
	// between its rounds for the cells it handled, as it estimates it
	// (sluice.GlobalStats.LeaderHeapBytes: its record of the entries it
	// imported and of the counts it wrote). HeapBytesPerNode is what the
	// cells take in memory (cellHeapBytes each, plus their identity's
	// bytes) and LeaderHeapBytes: an upper bound on a node's.
	CellsPerNode     int64 `json:"cells_per_node"`
	LeaderHeapBytes  int64 `json:"leader_heap_bytes"`
	HeapBytesPerNode int64 `json:"heap_bytes_per_node"`
	// OverAdmission is OverPct: what the deployment admitted above the
	// exact model, in percent of the model's admissions; UnderAdmission is
	// UnderPct, what it admitted below it.
	OverAdmission  float64 `json:"over_admission"`
	UnderAdmission float64 `json:"under_admission"`
	// Identities is the number of identities the scenario sends requests
	// for (Identifiers).
	Identities int `json:"identities"`
	// BusiestNodeLoad is the most requests one node served over the mean of
	// its region's nodes (the highest of the regions): 1 when the load
	// balancer spreads requests evenly; with identity-affine routing
	// (BalanceHash), a node that an identity of the Zipf distribution's
	// head hashes to serves it alone.
	BusiestNodeLoad float64 `json:"busiest_node_load"`
	// RedisFloorCallsPerRequest is the floor under RedisCallsPerRequest of
	// any regional store keyed by identity whose nodes decide from their
	// own memory: a read and a write for each node, identity and window
	// the node served, divided by the requests (shared origin; 0 in
	// cluster mode).
	RedisFloorCallsPerRequest float64 `json:"redis_floor_calls_per_request"`
	// MySQLRowsReadPerSecond is the rows the global layer's MySQL store
	// would read, in all regions, per second of virtual time, counted as
	// MariaDB's Handler_read_* counts them: for each read, the batch rows
	// it reads (a batch row carries many cells), the regions present, the
	// denial rows returned, and the end of each of those index ranges
	// (see readRows).
	MySQLRowsReadPerSecond float64 `json:"mysql_rows_read_per_second"`
}

// RedisSplit is a figure of Redis commands split by the origin call that
// runs them.
type RedisSplit struct {
	Load   float64 `json:"load"`   // hydration reads of a cold or stale counter
	Apply  float64 `json:"apply"`  // replays of accepted increments
	Decide float64 `json:"decide"` // origin decisions of counters in strict mode
	Global float64 `json:"global"` // the global layer's: the lease, nominations and imports
}

// cellHeapBytes is the memory one counter cell takes in a limiter besides
// its identity's strings: the cell, its entry in the hash trie and the
// trie's share of interior nodes, measured by TestCellHeapBytes.
const cellHeapBytes = 230

// The Redis origin's commands, as INFO commandstats counts them (see
// docs/regional-origins.md; origin/redis's TestCommandsPerCall pins
// them): a load is two HMGETs; a replay one EVALSHA per 256 cells, whose script
// runs HMGET and HSET for each cell it raises, and PEXPIRE for a new one; a
// decision one EVALSHA whose script runs two HMGETs, and HSET when it writes
// (PEXPIRE for a new cell).
const (
	loadCommands       = 2
	applyCallCommands  = 1
	applyCellCommands  = 2
	decideReadCommands = 3
	decideWrites       = 1
)

// redisCosts counts the commands and bytes of a region's origin calls.
type redisCosts struct {
	loadCmds, applyCmds, decideCmds atomic.Int64 // commands, by the call that runs them
	regionCmds                      atomic.Int64 // the global layer's: lease, nominations, imports
	bytes                           atomic.Int64

	mu      sync.Mutex
	written map[origin.Cell]struct{} // cells written: the first write sets the expiry
}

// load counts a Load of key.
func (c *redisCosts) load(key origin.Key, seq int64) {
	cur := redis.CellKey(origin.Cell{Key: key, Sequence: seq})
	c.loadCmds.Add(loadCommands)
	c.bytes.Add(2 * resp("HMGET", cur, "n", "i"))
}

// scriptCells is the most cells one call of the Redis origin's raise
// script takes (its maxScriptCells).
const scriptCells = 256

// apply counts the replay of deltas: a call of the raise script per
// scriptCells cells.
func (c *redisCosts) apply(deltas []origin.Delta) {
	n := applyCallCommands * scriptCalls(len(deltas))
	args := make([]string, 0, 3+4*len(deltas))
	args = append(args, "EVALSHA", sha, strconv.Itoa(len(deltas)))
	for _, d := range deltas {
		n += applyCellCommands + c.expiry(d.Cell)
		args = append(args, redis.CellKey(d.Cell))
	}
	for _, d := range deltas {
		args = append(args, writerField, strconv.FormatInt(d.Sent, 10), expiryArg)
	}
	c.applyCmds.Add(n)
	c.bytes.Add(resp(args...))
}

// decide counts the origin decision of ch, which admitted or wrote
// something when wrote is set.
func (c *redisCosts) decide(ch origin.Check, wrote bool) {
	n := int64(decideReadCommands)
	cur := origin.Cell{Key: ch.Key, Sequence: ch.Seq}
	if wrote {
		n += decideWrites + c.expiry(cur)
	}
	c.decideCmds.Add(n)
	args := []string{"EVALSHA", sha, "2", redis.CellKey(cur), redis.CellKey(origin.Cell{Key: ch.Key, Sequence: ch.Seq - 1}),
		"60000", "12345", strconv.FormatInt(ch.Sent, 10), "0", "0", expiryArg, writerField}
	for _, a := range ch.Asks {
		args = append(args, strconv.FormatInt(a.Limit, 10), strconv.FormatInt(a.Cost, 10))
	}
	c.bytes.Add(resp(args...))
}

// The commands of the Redis origin's origin.Region calls: the lease script
// (its call, GET and HMGET; HSET, SET and PTTL too when the caller holds
// the lease), RPUSH and LTRIM for nominations, LPOP for taking them, and
// the import script: one call per scriptCells cells, whose script runs
// HMGET and HSET for each cell (PEXPIRE too when it creates the cell's
// key, which counts as a key written). A leader's calls (ImportStored)
// also check the lease (GET), and a cell it knows takes one HSET, with no
// HMGET, in calls of the store script.
const (
	leadCommands       = 3
	leadHeldCommands   = 6 // and PEXPIRE of the term once in three days and a half
	nominateCommands   = 2
	nominatedCommands  = 1
	importCallCommands = 1
	importCellCommands = 2
	fenceCommands      = 1
	knownCellCommands  = 1
)

// importCommands returns the commands of an import of n cells, their
// keys' expiries aside.
func importCommands(n int) int64 {
	return importCallCommands*scriptCalls(n) + importCellCommands*int64(n)
}

// storedImportCommands returns the commands of a leader's import of read
// cells it merges and known cells it writes without reading them, their
// keys' expiries aside: each call of up to scriptCells cells of one kind
// also checks the lease (GET), and a known cell costs its HSET alone.
func storedImportCommands(read, known int) int64 {
	calls := scriptCalls(read) + scriptCalls(known)
	return (importCallCommands+fenceCommands)*calls + importCellCommands*int64(read) + knownCellCommands*int64(known)
}

// scriptCalls returns the script calls that n cells take, scriptCells a
// call.
func scriptCalls(n int) int64 { return int64((n + scriptCells - 1) / scriptCells) }

// region counts n commands of the global layer's calls.
func (c *redisCosts) region(n int64) { c.regionCmds.Add(n) }

// commands returns the commands counted, by call.
func (c *redisCosts) commands() (load, apply, decide, region int64) {
	return c.loadCmds.Load(), c.applyCmds.Load(), c.decideCmds.Load(), c.regionCmds.Load()
}

// keysWritten returns how many distinct cells were written.
func (c *redisCosts) keysWritten() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.written))
}

// expiry returns 1 for the first write of cell (its PEXPIRE), else 0.
func (c *redisCosts) expiry(cell origin.Cell) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.written == nil {
		c.written = make(map[origin.Cell]struct{})
	}
	if _, ok := c.written[cell]; ok {
		return 0
	}
	c.written[cell] = struct{}{}
	return 1
}

// Typical arguments of the Redis origin's scripts, for their sizes.
const (
	sha         = "0123456789abcdef0123456789abcdef01234567" // a script's SHA-1, 40 hex digits
	writerField = "0123456789abcdef"                         // a writer's field, 16 hex digits
	expiryArg   = "180000"                                   // the expiry of a new cell, ms
)

// resp returns the bytes of a command in the Redis protocol: an array of
// bulk strings.
func resp(args ...string) int64 {
	n := 1 + len(strconv.Itoa(len(args))) + 2
	for _, a := range args {
		n += 1 + len(strconv.Itoa(len(a))) + 2 + len(a) + 2
	}
	return int64(n)
}

// served counts the distinct (node, identity, window) triples that
// requests reached, for the floor of the Redis commands a request takes
// (Costs.RedisFloorCallsPerRequest): a bit per node and identity, cleared
// when the window changes (requests come in time order).
type served struct {
	words  int // uint64 words per identity
	bits   []uint64
	window int64
	pairs  int64
}

func newServed(ids, nodes int) *served {
	words := (nodes + 63) / 64
	return &served{words: words, bits: make([]uint64, ids*words), window: math.MinInt64}
}

// see records that a request of identity id in window reached node.
func (s *served) see(id, node int, window int64) {
	if window != s.window {
		clear(s.bits)
		s.window = window
	}
	w, b := id*s.words+node/64, uint64(1)<<(node%64)
	if s.bits[w]&b == 0 {
		s.bits[w] |= b
		s.pairs++
	}
}

// leaderHeap is the nodes' sluice.Observer: it keeps the most memory a
// leader reported keeping between its rounds, and ignores the rest.
type leaderHeap struct{ most atomic.Int64 }

var _ sluice.Observer = (*leaderHeap)(nil)

func (h *leaderHeap) GlobalRound(st sluice.GlobalStats) {
	for {
		m := h.most.Load()
		if st.LeaderHeapBytes <= m || h.most.CompareAndSwap(m, st.LeaderHeapBytes) {
			return
		}
	}
}

func (*leaderHeap) OriginRead(string, time.Duration, error) {}
func (*leaderHeap) Replayed(int, time.Duration, error)      {}
func (*leaderHeap) ReplayBacklog(int64)                     {}
func (*leaderHeap) Swept(int, int)                          {}
func (*leaderHeap) Evicted(string, int)                     {}
func (*leaderHeap) Dropped(string, int, int64)              {}
