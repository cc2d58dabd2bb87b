package sluice

import "time"

// ReadReason says why the limiter read its origin synchronously.
type ReadReason string

// The reasons for a synchronous origin read.
const (
	ReadHydrate ReadReason = "hydrate" // a cold counter's first decision
	ReadStrict  ReadReason = "strict"  // a decision in strict mode
	ReadRefresh ReadReason = "refresh" // a warm counter older than RefreshAfter
)

// Observer receives the limiter's internal measurements, for metrics. Every
// method must be safe for concurrent use and must return quickly; it is
// called from request paths and background goroutines. Embed [NopObserver]
// to implement only part of it.
type Observer interface {
	// OriginRead reports one synchronous origin read and its outcome.
	OriginRead(reason ReadReason, elapsed time.Duration, err error)
	// Replayed reports one replay call of cells cells to the origin.
	Replayed(cells int, elapsed time.Duration, err error)
	// ReplayBacklog reports the number of cells waiting for replay.
	ReplayBacklog(cells int64)
	// Swept reports one janitor pass: cells kept and cells evicted.
	Swept(live, evicted int)
	// Evicted reports cells of one tenant (a workspace) evicted because
	// the table was full or the tenant was over MaxCountersPerWorkspace.
	Evicted(workspace string, cells int)
	// Dropped reports accepted increments given up on before the origin
	// confirmed them, and why.
	Dropped(reason DropReason, cells int, increments int64)
}

// DropReason says why accepted increments were given up on before the
// origin confirmed them.
type DropReason string

// The reasons for dropping increments.
const (
	// DropExpired: the cell's window had passed (no decision reads it any
	// more) before the origin could be reached.
	DropExpired DropReason = "expired"
	// DropRefused: the origin refused the cell on its own several times
	// in a row (for example a key another program overwrote).
	DropRefused DropReason = "refused"
	// DropClose: Close ended after FlushTimeout with the origin still
	// unreachable.
	DropClose DropReason = "close"
)

// NopObserver is an [Observer] that ignores everything.
type NopObserver struct{}

// OriginRead implements [Observer].
func (NopObserver) OriginRead(ReadReason, time.Duration, error) {}

// Replayed implements [Observer].
func (NopObserver) Replayed(int, time.Duration, error) {}

// ReplayBacklog implements [Observer].
func (NopObserver) ReplayBacklog(int64) {}

// Swept implements [Observer].
func (NopObserver) Swept(int, int) {}

// Evicted implements [Observer].
func (NopObserver) Evicted(string, int) {}

// Dropped implements [Observer].
func (NopObserver) Dropped(DropReason, int, int64) {}
