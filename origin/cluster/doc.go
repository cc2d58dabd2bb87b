// Package cluster is a regional origin with no shared store: the nodes of a
// region form a cluster (hashicorp/memberlist), and each counter identity's
// authoritative count lives in the memory of one node, its owner, chosen by
// rendezvous hashing over the members ([Ring]).
//
// The [Origin] routes each call of the limiter to the identity's owner: a
// call for an identity this node owns goes to its own store with no network,
// any other goes to the owner over the peer RPC, a small JSON-over-HTTP
// service mounted on the owner's HTTP port ([Origin.Handler]) and
// authenticated with an HMAC derived from the cluster secret, signed for the
// receiver's id and its incarnation (a random id drawn at start and gossiped
// to the members), so a captured call replays at no other node and at no
// later run of its own; a call is refused on its headers before its body is
// read, and apply and seed take only the cells the receiver owns or stands
// in for. A breaker per peer turns an unreachable owner into fast failures;
// once it is open, the owner's runner-up on the ring stands in for it
// (seeded with what this node saw), so the nodes that gave up on the owner
// converge on one stand-in instead of deciding alone until the failure
// detector removes the owner.
// If no member answers, the limiter decides locally, as it does when Redis
// is down.
//
// When an owner denies a strict-mode request (a cell at its limit), it
// broadcasts the totals of both cells to every member, which raise their
// local views to them through [origin.Pusher] (the limiter): they then deny that
// counter locally, with no call to the owner, until its window admits again.
//
// When the membership changes, identities move to their new owners. Each
// node remembers the last totals it saw per cell and seeds the new owner of
// every cell that moved with them; the new owner keeps the highest seed, so
// it starts from the best view any surviving node had rather than from zero.
// See docs/cluster-mode.md for the accuracy cost.
//
// The Origin is also an [origin.Region]: the region's lease and queue of
// nominations live at the owner of one fixed key, so one node of the
// region at a time runs the global layer's rounds, and the leader imports
// the other regions' counts at each cell's owner, which returns them with
// the cell's totals (see [Origin.Lead]).
package cluster
