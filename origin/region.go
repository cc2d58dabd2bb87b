package origin

import (
	"context"
	"errors"
	"time"
)

// Region is implemented by an origin through which the nodes of one region
// share the global layer (see sluice's GlobalConfig), so that its work grows
// with regions, not with nodes:
//
//   - One node at a time, the leader, runs the region's global rounds. The
//     nodes elect it through [Region.Lead]: a lease that lapses when its
//     holder stops renewing it, with a fence that grows with each new
//     holder.
//   - The other nodes hand the leader, through the origin, the cells whose
//     regional count is to be published and the denials to propagate
//     ([Region.Nominate]); the leader takes them ([Region.Nominated]).
//   - The leader imports the other regions' counts into the origin
//     ([Region.Import]), apart from the region's own totals; every node
//     reads them with its hydrations, refreshes, replays and strict
//     decisions ([Counts.Imported], [Total.Imported]).
//
// A Region's methods never sit on a request's path: a limiter calls them
// from its global loop.
type Region interface {
	// Lead makes r.Holder the leader until the origin's clock passes
	// now+r.TTL, if no other holder's lease is current, or renews its
	// lease, and returns the lease as it stands after the call. While
	// r.Holder holds it, the call also stores r.Regions and r.Cursors, which
	// every later Lease returns: the region's view of the global layer,
	// for its other nodes and for the next leader. Two holders never hold
	// a lease at once by the origin's clock; a holder that has lost it
	// learns so at its next call.
	Lead(ctx context.Context, r LeaseRequest) (Lease, error)

	// Nominate queues ns for the region's leader. The queue is bounded: a
	// nomination that finds it full drops the oldest ones (a count is
	// nominated again as it grows; a denial lost costs only the delay of
	// the other regions' own counts).
	Nominate(ctx context.Context, ns []Nomination) error

	// Nominated takes up to max nominations from the queue, oldest first.
	// A nomination is taken once: a leader that takes some and fails before
	// it writes them loses them, as a full queue does.
	Nominated(ctx context.Context, max int) ([]Nomination, error)

	// Import raises the imported count of each import's cell (see
	// [Import]); it never lowers one, so an import sent twice, or late,
	// changes nothing. A cell the origin does not hold is created with its
	// imported count and the expiry rule of [Origin.Apply].
	Import(ctx context.Context, imports []Import) error
}

// LeaseRequest is the argument of [Region.Lead].
type LeaseRequest struct {
	// Holder names the node asking: unique in the region (sluice draws one
	// per limiter).
	Holder string
	// TTL is how long the lease lasts without a renewal (> 0).
	TTL time.Duration
	// Regions and Cursors are stored if Holder holds the lease after the
	// call (see [Lease]).
	Regions int
	Cursors Cursors
}

// Cursors are where a region's leader has read the global store to: its
// counts and its denial rows (global.Cursor values).
type Cursors struct {
	Counts, Denials int64
}

// Lease is the state of a region's lease after [Region.Lead].
type Lease struct {
	// Held reports that the caller holds the lease.
	Held bool
	// Holder is the node that holds it ("" if it lapsed and nobody took
	// it); Since is when it took it, in Unix ms of the origin's clock.
	Holder string
	Since  int64
	// Fence grows by one each time a new holder takes the lease: a holder
	// whose Fence changed between two of its calls lost the lease
	// meanwhile.
	Fence int64
	// Regions and Cursors are what the holder last stored (zero if
	// nobody has).
	Regions int
	Cursors Cursors
}

// Nomination is a cell a node hands its region's leader: its region's total
// to publish (Usage 0), or a denial to propagate (Usage > 0).
type Nomination struct {
	Cell Cell
	// Count is the cell's regional total as the node last read it from the
	// origin.
	Count int64
	// Limit is the cell's limit.
	Limit int64
	// Usage, for a denial, is the cell's usage where it was denied: its
	// region's count and what it had imported.
	Usage int64
}

// Import is what a region's leader imports into the origin for one cell.
// The origin keeps, apart from the cell's regional total, each other
// region's entry of the cell (the highest count imported of it) and their
// sum; the cell's imported count becomes the highest of its count before,
// that sum, and Usage less the cell's regional total.
type Import struct {
	Cell Cell
	// Counts are other regions' published counts of the cell.
	Counts []RegionCount
	// Usage is the usage at which another region denied the cell (0 if it
	// did not): the region's own count is part of it, so the import raises
	// the cell's usage to it, not by it.
	Usage int64
	// Known, for [StoredImporter.ImportStored], reports that the leader
	// knows what the origin stores of the cell: Counts holds every other
	// region's entry the origin stores after this import (not only those
	// that rose) and Imported the cell's imported count after it, and no
	// other holder has written the cell since the leader read it (see
	// [Stored]). Usage is then 0. An origin may write a known import
	// without reading the cell; one that reads it merges it like any
	// other import, which stores the same.
	Known    bool
	Imported int64
}

// StoredImporter is a [Region] whose imports can skip reading a cell when
// the leader knows what the origin stores of it ([Import.Known]).
type StoredImporter interface {
	Region
	// ImportStored imports as [Region.Import] does, on behalf of holder,
	// and returns for each import, in order, what the origin stores of its
	// cell after it ([Stored]). It imports nothing, and fails with
	// [ErrFenced], unless holder holds the region's lease when the origin
	// writes: a leader that lost the lease cannot change what the new
	// leader knows. An error leaves the cells of the call unknown to the
	// caller (some may have been written).
	ImportStored(ctx context.Context, holder string, imports []Import) ([]Stored, error)
}

// ErrFenced is returned by [StoredImporter.ImportStored] when the holder
// named does not hold the region's lease.
var ErrFenced = errors.New("origin: the importer does not hold the region's lease")

// Stored is what an origin stores of an import's cell after
// [StoredImporter.ImportStored], when it read the cell (Read): the entries
// of the regions of the import's Counts, the sum of every region's entry
// (Sum; entries of regions the import did not name are in it), and the
// cell's imported count. A leader that holds every region's entry of the
// cell (their sum is Sum) knows the cell until another holder writes it.
// Read is false for a cell the origin wrote without reading (a known
// import) and for an origin that cannot tell the caller what it stores
// for sure (another holder could write the cell between two calls).
type Stored struct {
	Read     bool
	Counts   []RegionCount
	Sum      int64
	Imported int64
}

// RegionCount is one region's published count of a cell.
type RegionCount struct {
	Region string
	Count  int64
}
