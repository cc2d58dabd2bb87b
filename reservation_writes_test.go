package sluice

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// refusingOrigin refuses every write.
type refusingOrigin struct {
	*memory.Store
	tries *atomic.Int64
}

func (o refusingOrigin) Withdraw(context.Context, origin.Cell, origin.Writer) error {
	o.tries.Add(1)
	return origin.ErrUnavailable
}

// countingDrops counts the reservation writes dropped.
type countingDrops struct {
	nopObserver
	n atomic.Int64
}

func (c *countingDrops) Dropped(reason string, cells int, _ int64) {
	if reason == dropReservation {
		c.n.Add(int64(cells))
	}
}

// TestReservationWritesAreBounded queues one withdrawal more than
// maxReservationWrites while the origin refuses them: the queue keeps
// maxReservationWrites, the oldest is dropped and counted, and a round
// tries maxReservationFailures of them and keeps them all.
func TestReservationWritesAreBounded(t *testing.T) {
	drops := &countingDrops{}
	var tries atomic.Int64
	l, err := newLimiter(Config{Origin: refusingOrigin{memory.New(nil), &tries}, Observer: drops, FlushTimeout: time.Millisecond},
		drive.Options{ReplayTicks: make(chan time.Time)}) // never fires: the test sends
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cell := origin.Cell{Key: origin.Key{Namespace: "n", Identifier: "i", Duration: time.Hour}, Sequence: time.Now().UnixMilli() / time.Hour.Milliseconds()}
	for i := range maxReservationWrites + 1 {
		l.replay.writeLater(reservationWrite{Delta: origin.Delta{Cell: cell, Writer: origin.Writer(i + 1)}, withdraw: true})
	}
	if writes, _ := l.replay.reservedLeft(); writes != maxReservationWrites {
		t.Errorf("%d reservation writes queued, want %d", writes, maxReservationWrites)
	}
	if n := drops.n.Load(); n != 1 {
		t.Errorf("%d reservation writes dropped, want 1", n)
	}
	if !l.replay.sendReserved(context.Background()) {
		t.Error("a round found no reservation writes")
	}
	if writes, _ := l.replay.reservedLeft(); writes != maxReservationWrites {
		t.Errorf("%d reservation writes left after a refused round, want all %d", writes, maxReservationWrites)
	}
	if n := tries.Load(); n != maxReservationFailures {
		t.Errorf("a round tried %d withdrawals, want %d", n, maxReservationFailures)
	}
}
