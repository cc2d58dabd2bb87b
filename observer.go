package sluice

import "time"

// Observer receives the limiter's internal measurements, for metrics. Every
// method must be safe for concurrent use and must return quickly: it is
// called from request paths and background goroutines.
type Observer interface {
	// OriginRead reports one synchronous origin call and its outcome. The
	// reason is "hydrate" (a cold counter's first decision), "refresh" (a
	// warm counter older than RefreshAfter) or "strict" (a decision the
	// origin makes: strict mode, or near the limit). The counters of a
	// batch hydrated with one call (an origin.BatchLoader's LoadMany) are
	// reported one by one, each with the call's elapsed time and its own
	// outcome.
	OriginRead(reason string, elapsed time.Duration, err error)
	// Replayed reports one replay call of cells cells to the origin.
	Replayed(cells int, elapsed time.Duration, err error)
	// ReplayBacklog reports the number of cells waiting for replay,
	// queued or parked, at every replay round: zero once everything the
	// limiter admitted has reached the origin.
	ReplayBacklog(cells int64)
	// Swept reports one janitor pass: cells kept and cells evicted.
	Swept(live, evicted int)
	// Evicted reports cells of one tenant (a workspace) evicted because
	// the table was full or the tenant was over MaxCountersPerWorkspace.
	Evicted(workspace string, cells int)
	// Dropped reports accepted increments given up on before the origin
	// confirmed them. The reason is "expired" (the cell's window had passed
	// before the origin could be reached), "refused" (the origin refused
	// the cell on its own several times in a row, for example a key another
	// program overwrote) or "close" (Close ended after FlushTimeout with the
	// origin still unreachable).
	Dropped(reason string, cells int, increments int64)
	// GlobalRound reports one round of the global layer.
	GlobalRound(GlobalStats)
}

// Why the limiter called its origin synchronously (Observer.OriginRead).
const (
	readHydrate = "hydrate"
	readStrict  = "strict"
	readRefresh = "refresh"
)

// Why accepted increments were given up on (Observer.Dropped).
const (
	dropExpired = "expired"
	dropRefused = "refused"
	dropClose   = "close"
	// dropReservation: a write about a batch's reservation the origin
	// never took (see maxReservationWrites).
	dropReservation = "reservation"
)

// nopObserver is the Observer of a Config that sets none.
type nopObserver struct{}

func (nopObserver) OriginRead(string, time.Duration, error) {}
func (nopObserver) Replayed(int, time.Duration, error)      {}
func (nopObserver) ReplayBacklog(int64)                     {}
func (nopObserver) Swept(int, int)                          {}
func (nopObserver) Evicted(string, int)                     {}
func (nopObserver) Dropped(string, int, int64)              {}
func (nopObserver) GlobalRound(GlobalStats)                 {}
