// Package global defines the global layer: the store through which the
// regions of one deployment converge (MySQL or MariaDB in production).
//
// Two mechanisms share it, each of which a limiter can switch off:
//
//   - Global counters: each region publishes its own regional count of each
//     active window cell (a G-Counter with one entry per region: an entry only
//     grows, and is written as max(stored, new)). Its leader reads back the
//     entries that changed, every region's, and imports the other regions'
//     into its regional origin, where a cell's imported count is the sum of
//     its other regions' entries; its own region's entry tells it what is
//     stored already.
//   - Denial propagation: the first qualifying denial of a cell writes one
//     row naming the cell at its originating sequence, the limit and when the
//     row stops mattering; the other regions import active rows into that
//     exact cell. A region never reads back its own rows: its nodes hold its
//     counts through its regional origin already.
//
// One node per region at a time (its leader, elected through the regional
// origin: see origin.Region) calls a Store; calls from several nodes of a
// region are safe too, as the cluster origin's nodes make them.
//
// The limiter never calls a Store on the request path: publish, pull, denial
// sync and cleanup run in the limiter's background loop, and a failing Store
// only delays convergence between regions.
//
// Implementations live in their own packages: [memory] in process (tests,
// simulations), mysql for MySQL and MariaDB.
package global

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/origin"
)

// ErrUnavailable reports that the store cannot serve a call right now (for
// example because its circuit breaker is open). The limiter retries on its
// next round; it never surfaces to a rate-limit caller.
var ErrUnavailable = errors.New("global: unavailable")

// Cursor marks how far a node has read a store's changes. Its meaning is the
// implementation's (a timestamp of the store's clock, a row id); callers only
// keep the value a read returned and pass it to the next read. The zero
// Cursor reads every active row.
type Cursor int64

// Count is one region's published count of one window cell.
type Count struct {
	Cell  origin.Cell
	Count int64
	// ExpiresAt is the Unix ms after which the cell no longer takes part in
	// any decision: the end of the window after it, (Sequence+2)*Duration.
	ExpiresAt int64
}

// Entry is one region's published count of one cell, as a pull reads it:
// the G-Counter entry of (cell, region).
type Entry struct {
	Cell   origin.Cell
	Region string
	Count  int64
}

// Pull is the answer of [Store.Pull].
type Pull struct {
	// Entries holds every entry changed since the cursor passed in whose
	// cell is active (possibly more: an entry may be reported again), of
	// every region, the caller's own included; or, where a store reads a
	// large backlog a page at a time, those of the oldest changes, the
	// others coming with the Pulls from Next. A caller sums a cell's
	// entries of the other regions (keeping the highest count it read of
	// each) for the cell's imported count.
	Entries []Entry
	// Regions is the number of regions that announced themselves
	// recently (see [Store.Announce]), this one included. It is
	// at least 1.
	Regions int
	// Next is the cursor to pass to the next Pull.
	Next Cursor
}

// Denial is a denial propagated to every region: the cell, at the sequence
// where it happened, denies until ExpiresAt.
type Denial struct {
	Cell origin.Cell
	// Limit is the limit that was exceeded.
	Limit int64
	// Usage is the cell's own usage where it was denied (its region's
	// count plus what it had imported), without the previous cell's
	// weight. A receiving node raises the cell's imported count until its
	// usage reaches Usage, so it denies what the originator denied; rows
	// without a usage (0) stand for the whole Limit.
	Usage int64
	// Region is the region that emitted the row.
	Region string
	// ExpiresAt is (Sequence+2)*Duration in Unix ms: past it the cell
	// weighs nothing in any sliding window.
	ExpiresAt int64
}

// Store is the shared record of the global layer. Implementations must be
// safe for concurrent use. Times are Unix milliseconds of the limiter's
// clock, passed in by the caller, so a simulation can run in virtual time.
type Store interface {
	// Publish records region's counts: for each cell, region's entry
	// becomes max(stored, new), however the store keeps it (global/mysql:
	// rows of many cells, appended). Concurrent writers never deadlock.
	// Publishing does not announce region: the caller announces
	// it through Announce, which it does every few intervals whether it
	// publishes or not (a store may also count a region that publishes as
	// present, as one that announces).
	Publish(ctx context.Context, region string, counts []Count, now int64) error

	// Announce records that region is alive at now, so that other regions
	// count it in [Pull.Regions] even before it publishes anything.
	Announce(ctx context.Context, region string, now int64) error

	// Pull returns every entry changed since cursor whose cell is still
	// active at now, of every region (region's own included: a node of a
	// region whose nodes share no origin floors its counts at them).
	// Regions announced within the last activeFor milliseconds are counted
	// in Pull.Regions. A store may return only the cells of the oldest
	// changes (a page) when many changed, with a Next from which the
	// following Pulls read the rest; every change is read by a Pull in the
	// end.
	Pull(ctx context.Context, region string, cursor Cursor, now, activeFor int64) (Pull, error)

	// EmitDenials records denials. A cell already recorded (same identity
	// and sequence) is left as it is: the first row wins.
	EmitDenials(ctx context.Context, denials []Denial) error

	// Denials returns the denials recorded since cursor by regions other
	// than region that are still active at now (ExpiresAt > now), and the
	// cursor for the next call. Rows of region itself are left out (region
	// is compared byte for byte, as in Pull): its nodes converge on its
	// counts through its regional origin, and a row of its own applied as an
	// import would count its usage twice.
	Denials(ctx context.Context, region string, cursor Cursor, now int64) ([]Denial, Cursor, error)

	// Cleanup deletes rows of both kinds that expired before now, at most
	// batch rows per statement, and returns how many it deleted; a store
	// may also merge rows into fewer, leaving every entry as it was. Only
	// one caller at a time does the work (a database lock); the others
	// return at once with 0.
	Cleanup(ctx context.Context, now int64, batch int) (int, error)

	// Close releases the store. It is idempotent.
	Close() error
}

// PullerWithDenials is implemented by a Store that reads what Pull and
// Denials read in one call (global/mysql: in one statement). A limiter that
// runs both mechanisms on such a store makes one read per round instead of
// two.
type PullerWithDenials interface {
	// PullWithDenials returns what Pull(ctx, region, cursor, now,
	// activeFor) and Denials(ctx, region, denialCursor, now) would return,
	// read at once: the pull, the denials, and the cursor for the next read
	// of denials. It fails as a whole.
	PullWithDenials(ctx context.Context, region string, cursor, denialCursor Cursor, now, activeFor int64) (Pull, []Denial, Cursor, error)
}
