// Package drive lets the simulator and the tests run a limiter's background
// work themselves, in virtual or test time, instead of on the limiter's own
// timers: its replay rounds, its global rounds, and the global layer's
// fixed-share publication rule that the simulator compares with. A server
// never needs it, and it is not part of the public API.
//
// Package sluice cannot be imported here (it imports this package), so it
// registers its constructor when it is initialised, and [New] hands the
// configuration and the limiter across as values of the caller's types.
package drive

import (
	"context"
	"fmt"
	"time"
)

// Options are the settings of a limiter that only a driver sets.
type Options struct {
	// ReplayTicks, if set, replaces the replay interval's timer: the replay
	// loop runs one round per value received, and never on its own.
	ReplayTicks <-chan time.Time

	// GlobalTicks, if set, replaces the global rounds' timer (a round every
	// global interval over RoundsPerInterval, ±20%): the global
	// loop runs one round per value received, and writes denials in rounds
	// only. A channel that never fires leaves every round to SyncGlobal.
	GlobalTicks <-chan time.Time

	// PublishShare, if set (0 < share <= 1), replaces the publication rule
	// of the global counters by a fixed share of the limit: a cell is
	// published once its count reaches share × limit. A fixed share leaves
	// a free zone (traffic spread evenly over R regions passes up to
	// R × share × limit unseen); the simulator runs it to compare with the
	// limiter's own rule.
	PublishShare float64
}

// Handle runs a limiter's background rounds on the caller's goroutine.
type Handle interface {
	// Flush replays every accepted increment queued so far to the origin
	// and returns when the origin has answered. A failed replay keeps its
	// increments queued for the next round.
	Flush()
	// Round runs one replay round as the limiter's dispatcher would at
	// this instant of its clock: it turns the parked list if a turn is due
	// and replays the queued cells; cells parked far from their limit wait
	// for their turn. It must not run concurrently with itself.
	Round()
	// SyncGlobal runs one round of the global layer now: publish, pull,
	// denial sync and, every few rounds, cleanup. It returns the round's
	// first failure. Without a global layer it does nothing.
	SyncGlobal(ctx context.Context) error
	// Cells returns how many counter cells the limiter holds in memory.
	Cells() int64
}

// Constructor builds a limiter from a configuration with o; package sluice
// registers one.
type Constructor func(cfg any, o Options) (limiter any, h Handle, err error)

var constructor Constructor

// Register sets the constructor [New] uses. Package sluice calls it when it
// is initialised; nothing else should.
func Register(c Constructor) { constructor = c }

// New builds a limiter of type L (a *sluice.Limiter) from cfg (a
// sluice.Config), with its background work driven by o and h.
func New[L any](cfg any, o Options) (L, Handle, error) {
	var zero L
	if constructor == nil {
		return zero, nil, fmt.Errorf("drive: package sluice is not linked in")
	}
	v, h, err := constructor(cfg, o)
	if err != nil {
		return zero, nil, err
	}
	l, ok := v.(L)
	if !ok {
		return zero, nil, fmt.Errorf("drive: the limiter is a %T, not the type asked for", v)
	}
	return l, h, nil
}

// RoundsPerInterval is how many global rounds a limiter runs per global
// interval, for a driver that ticks them (GlobalTicks).
const RoundsPerInterval = 3
