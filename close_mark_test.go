package sluice

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin/memory"
)

// TestFinalFlushWaitsForAMarkInFlight replays, step by step, the
// interleaving TestReportCloseRace ran into once in about a hundred rounds:
// a round that Close cuts short pops a cell and its write fails; between
// the flush clearing the cell's flag and the failed write queueing it
// again, another admission's mark sets the flag and is descheduled before
// it pushes the cell, so the requeue finds the flag set and pushes
// nothing. The final flush then found no cell queued, stopped, and Close
// returned nil with the admitted units never written. It must wait for the
// mark in flight and write them.
func TestFinalFlushWaitsForAMarkInFlight(t *testing.T) {
	o := memory.New(nil)
	l, err := newLimiter(Config{Origin: o}, drive.Options{ReplayTicks: make(chan time.Time)})
	if err != nil {
		t.Fatal(err)
	}
	r := Request{Namespace: "n", Identifier: "u", Limit: 100, Duration: time.Hour, Cost: 3, Time: time.Now()}
	for range 4 {
		if res, err := l.Ratelimit(context.Background(), r); err != nil || !res.Success {
			t.Fatalf("admission: %+v, %v", res, err)
		}
	}
	rp := l.replay
	c := rp.head.Swap(nil) // a round pops the cell,
	if c == nil {
		t.Fatal("the admitted cell is not queued")
	}
	c.clearFlag(flagDirty) // its flush clears the flag, and its write fails
	rp.marking.Add(1)      // another admission's mark sets the flag,
	c.setFlag(flagDirty)   // and is descheduled before its push
	rp.mark(c)             // the failed write's requeue finds the flag set

	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a mark held the cell unqueued", err)
	case <-time.After(50 * time.Millisecond):
	}
	rp.push(c) // the mark resumes
	rp.marking.Add(-1)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	var q resolved
	if err := resolve(&q, &r, nil); err != nil {
		t.Fatal(err)
	}
	counts, err := o.Load(context.Background(), q.cell.Key, q.pos.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Current != 12 {
		t.Fatalf("the origin counts %d of the 12 admitted", counts.Current)
	}
}
