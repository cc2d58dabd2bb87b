package sluice

import "slices"

// Fair eviction.
//
// Memory is shared by tenants: a tenant is a workspace (the server gives
// each Envoy RLS domain a workspace of its own). When the cells held pass
// MaxCounters, cells are evicted only from the tenants holding more than
// their fair share, those holding the most first: the share is the target
// of an eviction (90% of MaxCounters) divided by the tenants holding
// cells, or MaxCountersPerWorkspace when it is set. A tenant within its share never loses a counter to another
// tenant's traffic; a tenant past MaxCountersPerWorkspace loses its own
// least recently used cells, whatever the others hold.

// quotas returns, per tenant, how many of its cells to evict so that the
// table holds at most target cells, taking only what tenants hold above
// their fair share, from the largest holders first (their counts are
// lowered towards one common level, never below the share). held is the
// count per tenant; the share is perTenant if above zero, else target
// divided by the tenants, so that tenants within their share hold at most
// target together.
func quotas(held map[string]int64, target, perTenant int64) map[string]int64 {
	share := perTenant
	if share <= 0 && len(held) > 0 {
		share = max(1, target/int64(len(held)))
	}
	var total int64
	for _, n := range held {
		total += n
	}
	need := total - target
	out := map[string]int64{}
	if perTenant > 0 { // a hard cap per tenant, whatever the total
		for t, n := range held {
			if n > perTenant {
				out[t] = n - perTenant
				need -= n - perTenant
			}
		}
	}
	if need <= 0 {
		return out
	}
	level := levelFor(held, share, need)
	for t, n := range held {
		if over := n - max(level, share); over > out[t] {
			out[t] = over
		}
	}
	return out
}

// levelFor returns the highest level L >= share such that lowering every
// tenant above L to L frees at least need cells (share itself if even that
// frees less).
func levelFor(held map[string]int64, share, need int64) int64 {
	counts := make([]int64, 0, len(held))
	for _, n := range held {
		if n > share {
			counts = append(counts, n)
		}
	}
	slices.Sort(counts)
	slices.Reverse(counts) // largest first
	var above int64        // cells of the tenants above the current level
	for i, n := range counts {
		above += n
		next := share
		if i+1 < len(counts) {
			next = max(share, counts[i+1])
		}
		// Lowering the i+1 largest to next frees above - (i+1)*next.
		if freed := above - int64(i+1)*next; freed >= need {
			// The level lies in [next, n]: the highest that frees need.
			return max(next, (above-need)/int64(i+1))
		}
	}
	return share
}

// heldByTenant counts the cells each tenant holds.
func (t *cellTable) heldByTenant() map[string]int64 {
	held := map[string]int64{}
	for k := range t.m.All() {
		held[k.Workspace]++
	}
	return held
}

// evictFair brings the table down to 90% of MaxCounters, taking cells only
// from tenants over their share (see quotas), least recently used first
// within a tenant: first the cells used only once (identities seen once,
// the bulk of a scan), then by CLOCK: a pass clears the mark of a used cell
// and evicts a cell not used since the previous pass. The first three
// passes spare cells in strict mode and cells with increments the origin
// has not confirmed or a batch in flight; a fourth, if still needed, spares
// only cells used since the third. No pass evicts a cell whose write or
// origin decision is in flight. An evicted cell with unconfirmed increments
// stays reachable from the replay queue until they are sent, as a writer of
// its own: the cell created again in its place starts a new count at the
// origin, so neither undoes the other. It returns the cells evicted per
// tenant.
func (l *Limiter) evictFair(now int64) map[string]int {
	capacity := int64(l.cfg.MaxCounters)
	quota := quotas(l.cells.heldByTenant(), capacity*9/10, int64(l.cfg.MaxCountersPerWorkspace))
	evicted := map[string]int{}
	for pass := range 4 {
		if len(quota) == 0 {
			break
		}
		for k, c := range l.cells.m.All() {
			if quota[k.Workspace] <= 0 || !l.evictable(c, now, pass) {
				continue
			}
			if l.cells.delete(k, c) {
				evicted[k.Workspace]++
				if quota[k.Workspace]--; quota[k.Workspace] <= 0 {
					delete(quota, k.Workspace)
				}
			}
		}
	}
	return evicted
}

// evictable reports whether pass may evict c. The first pass takes only
// cells used once (by the request that created them), and leaves the marks
// of the others as they are, so that evictions in quick succession do not
// wear down the second chance of cells in use. The later passes take cells
// not used since the last pass looked at them (clearing the mark of those
// that were). The first three passes spare busy cells; no pass takes a cell
// whose write or decision is in flight.
func (l *Limiter) evictable(c *cell, now int64, pass int) bool {
	if pass == 0 {
		if c.flags.Load()&flagReused != 0 {
			return false
		}
	} else if c.flags.And(^flagTouched)&flagTouched != 0 {
		return false // used since the last pass: a second chance
	}
	if pass < 3 && c.busy(now) {
		return false
	}
	return c.flags.Load()&(flagWriting|flagDeciding) == 0
}
