package sluice_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	globalmemory "github.com/sluicehq/sluice/global/memory"
	"github.com/sluicehq/sluice/internal/drive"
)

// BenchmarkGlobalRoundHeldBack is one global round of a node holding
// 100,000 counters that each hold back a count under the publication rule's
// share (1 of a limit of 1,000 with two regions): the round reads the store
// and weighs every one of them, and writes nothing. The previous window's
// cells are there too: at the start of the window the rule looks up each
// counter's previous cell, halfway through it needs none.
func BenchmarkGlobalRoundHeldBack(b *testing.B) {
	for _, bc := range []struct {
		name string
		into time.Duration // how far into the window the rounds run
	}{
		{"window start", time.Minute / 1000},
		{"mid-window", time.Minute / 2},
	} {
		b.Run(bc.name, func(b *testing.B) { benchmarkHeldBack(b, bc.into) })
	}
}

func benchmarkHeldBack(b *testing.B, into time.Duration) {
	const counters, limit, d = 100_000, 1000, time.Minute
	clock := &virtualClock{}
	clock.set(9000*d.Milliseconds() + into.Milliseconds())
	regions := newRegions(b, 2, globalmemory.New(), clock, sluice.GlobalConfig{DisableDenials: true}, drive.Options{})
	ctx := context.Background()
	for range 2 { // both announce, then both count two regions
		for _, r := range regions {
			if err := r.SyncGlobal(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, at := range []time.Time{clock.now().Add(-d), clock.now()} {
		for i := range counters {
			if res, _ := regions[0].Ratelimit(ctx, req("id-"+strconv.Itoa(i), limit, 1, d, at)); !res.Success {
				b.Fatal("denied")
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := regions[0].SyncGlobal(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
