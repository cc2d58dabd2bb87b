// Package redis is the Redis regional origin: an [origin.Origin] that keeps
// the authoritative count of every window cell of a region in Redis (single
// node, Sentinel or Redis Cluster), so that the nodes of a region converge.
//
// The limiter never waits for Redis on its warm path. It replays accepted
// increments asynchronously through [Origin.Apply] (one pipeline of atomic
// increment-and-expire scripts, coalesced per cell by the caller) and reads a
// cold or strict counter through [Origin.Load] (one MGET of the current and
// the previous cell, one round trip).
//
// # Keys
//
// A cell's key is built by [CellKey]:
//
//	sl1:{<tag>}:<len>:<workspace>:<len>:<namespace>:<len>:<identifier>:<duration ms>:<sequence>
//
// "sl1" versions the layout. The identity is length-prefixed, so no two
// distinct cells share a key whatever bytes the strings hold. The hash tag is
// 16 hex digits of a 64-bit FNV-1a hash of the identity ([HashTag]): it
// contains no brace, so Redis Cluster hashes exactly the tag, and both cells
// of one identity (the only keys one MGET reads) are in the same slot. A cell
// key lives max(3 windows, Config.MinTTL) from its first increment.
//
// # Failure
//
// Every call runs under a deadline (Config.Timeout when the context has
// none) and through a circuit breaker (sony/gobreaker v2). Sustained failure
// opens the breaker; while it is open, calls fail at once with an error
// wrapping [origin.ErrUnavailable] and the limiter decides locally. After
// BreakerConfig.OpenTimeout (3 s by default) a probe call is let through, so
// a returning Redis is used again without a restart. State changes are logged
// (log/slog) and reported to the [Observer].
//
// See docs/redis-origin.md for the full description.
package redis
