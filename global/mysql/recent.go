package mysql

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/global"
)

// recentOverlap is how far before the clock of a store's last pull of a
// region its next recent pull reads (see recentReads): the time a write
// statement usually takes from its start to its commit, with a wide
// margin. A write that takes longer is read by the next whole pull, at
// most CursorOverlap after the last one.
const recentOverlap = time.Second

// maxRecentRegions bounds the regions a Store remembers pulls of: one in a
// server (its own region), a few in tests and simulations.
const maxRecentRegions = 64

// recentReads remembers, per region, the pulls a Store made (or its reads
// of denials: a Store keeps one recentReads for each), so that most
// pulls read only what changed since the last one, less recentOverlap,
// rather than the whole CursorOverlap of every change before it: the
// overlap made a leader pulling three times a second read each changed row
// about 16 times, and most of a region's MySQL reads.
//
// A whole pull reads from the cursor passed in and returns the cursor the
// read's clock gives (its clock minus CursorOverlap), as without this. A
// recent pull, which a pull is when the cursor passed in is the one the
// last whole pull of the region returned and that whole pull is less than
// CursorOverlap old, reads from the clock of the last pull less
// recentOverlap, and returns the cursor passed in: the cursor a region
// stores (and a new leader starts from) is always a whole pull's. So every
// row is read by a pull, as before: a row written in a statement that
// started at T and committed before T+CursorOverlap is read by the first
// whole pull after its commit, which reads from the clock of the whole pull
// before it, less CursorOverlap, earlier than T (see the package's tests).
// Most rows are read by a recent pull soon after their commit; a row whose
// statement took more than recentOverlap to commit may wait for the next
// whole pull, at most CursorOverlap later.
type recentReads struct {
	mu sync.Mutex
	m  map[string]recentRead
}

// recentRead is what a Store remembers of its pulls of one region.
type recentRead struct {
	next    global.Cursor // the cursor the last whole pull returned
	clock   int64         // the clock (µs) of the last pull, whole or recent
	wholeAt int64         // the limiter's clock (Unix ms) of the last whole pull
}

// from returns the cursor a pull of region from cursor at now reads from,
// and whether the pull is whole.
func (rr *recentReads) from(region string, cursor global.Cursor, now int64, overlap time.Duration) (global.Cursor, bool) {
	if overlap <= recentOverlap {
		return cursor, true
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	last, ok := rr.m[region]
	if !ok || last.next != cursor || now < last.wholeAt || now-last.wholeAt >= overlap.Milliseconds() {
		return cursor, true
	}
	return max(cursor, global.Cursor(last.clock-recentOverlap.Microseconds())), false
}

// after records a pull of region from cursor at now, whole or not, whose
// read had clock and returned p, and returns p as the caller gets it: a
// recent pull returns cursor. A pull that read a full page (paged) is
// forgotten: the pull after it is whole, from where the page ended.
func (rr *recentReads) after(region string, cursor global.Cursor, whole, paged bool, now, clock int64, p global.Pull) global.Pull {
	p.Next = rr.next(region, cursor, whole, paged, now, clock, p.Next)
	return p
}

// next records a read of region from cursor at now, whole or not, whose
// clock was clock and whose next cursor, read whole, would be next, and
// returns the cursor the caller gets: next for a whole read, cursor for a
// recent one. A read that took a full page (paged) is forgotten.
func (rr *recentReads) next(region string, cursor global.Cursor, whole, paged bool, now, clock int64, next global.Cursor) global.Cursor {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	switch {
	case paged:
		delete(rr.m, region)
	case whole:
		if rr.m == nil || len(rr.m) >= maxRecentRegions {
			rr.m = make(map[string]recentRead)
		}
		rr.m[region] = recentRead{next: next, clock: clock, wholeAt: now}
	default:
		last := rr.m[region]
		last.clock = max(last.clock, clock)
		rr.m[region] = last
		next = cursor
	}
	return next
}
