// Package redis is the Redis regional origin: an [origin.Origin] that keeps
// the authoritative count of every window cell of a region in Redis (single
// node, Sentinel or Redis Cluster), so that the nodes of a region converge.
//
// The limiter never waits for Redis on its warm path. It replays accepted
// increments asynchronously through [Origin.Apply] (a pipeline of atomic
// raise-and-expire scripts, coalesced per cell by the caller), reads a cold
// or stale counter through [Origin.Load] (two HMGETs of the current and the
// previous cell in one pipeline, one round trip), and has strict-mode
// requests decided atomically by [Origin.Decide] (one script call).
//
// # Keys
//
// A cell's key is built by [CellKey]:
//
//	sl2:{<tag>}:<len>:<workspace>:<len>:<namespace>:<len>:<identifier>:<duration ms>:<sequence>
//
// "sl2" ([KeyPrefix]) versions the layout. The identity is length-prefixed,
// so no two distinct cells share a key whatever bytes the strings hold. The
// hash tag is 16 hex digits of a 64-bit FNV-1a hash of the identity
// ([HashTag]): it contains no brace, so Redis Cluster hashes exactly the tag,
// and both cells of one identity (the keys one Load or Decide reads) are in
// the same slot.
//
// A cell is a hash: field "n" holds its total and one field per writer (16
// hex digits) holds that writer's share of it, so that a write sent twice
// counts once (see [origin.Delta]). A cell key lives max(TTLWindows windows,
// Config.MinTTL) from its first write.
//
// # Failure
//
// Every call runs under a deadline (Config.Timeout when the context has
// none) and through a circuit breaker (sony/gobreaker v2): the one breaker of
// a client of one server, or, on a Redis Cluster, the breaker of the master
// that serves the call's cells, so that a master that fails costs only the
// counters it serves. Sustained failure opens a breaker; while it is open,
// calls through it fail at once with an error wrapping
// [origin.ErrUnavailable] and the limiter decides those counters locally.
// An Apply whose cells live on several masters sends each master its cells
// at once, and a master that fails fails its own cells alone, reported in an
// [*origin.CellErrors]. After BreakerConfig.OpenTimeout (3 s by default) a
// probe call is let through, so a returning Redis is used again without a
// restart. State changes are logged (log/slog) and reported to the
// [Observer] (each master's to a [MasterObserver]); [Origin.BreakerState]
// and [Origin.BreakerStates] report them.
//
// See docs/regional-origins.md for the full description.
package redis
