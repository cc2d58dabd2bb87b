package sluice

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

func (t *cellTable) len() int {
	n := 0
	for range t.m.All() {
		n++
	}
	return n
}

// TestJanitorTracksActiveCounters runs the real janitor goroutine in a
// synctest bubble: after idle identities age past the previous window, memory
// holds only the counters still in use.
func TestJanitorTracksActiveCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Config{JanitorInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx := context.Background()
		hit := func(id string) {
			r := Request{Namespace: "ns", Identifier: id, Limit: 10, Duration: 10 * time.Second, Cost: 1}
			if _, err := l.Ratelimit(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 1000 {
			hit("idle-" + strconv.Itoa(i))
		}
		hit("active")
		if n := l.cells.len(); n != 1001 {
			t.Fatalf("%d cells, want 1001", n)
		}
		// Keep one identity busy for three windows; the rest go idle.
		for range 30 {
			time.Sleep(time.Second)
			hit("active")
		}
		synctest.Wait()
		if n := l.cells.len(); n > 2 {
			t.Fatalf("%d cells left after the idle ones aged out, want at most 2 (active: current and previous)", n)
		}
	})
}

// TestSweepKeepsCellsOfCallersInThePast has a caller pass its own
// Request.Time, far behind the limiter's clock: its cells are older than
// the clock's previous window, yet the sweep keeps them while they are in
// use, so the caller's counts hold; once unused, they go.
func TestSweepKeepsCellsOfCallersInThePast(t *testing.T) {
	l, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	past := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	r := Request{Namespace: "n", Identifier: "replayed", Limit: 10, Duration: time.Minute, Cost: 1, Time: past}
	now := time.Now().UnixMilli()
	for i := range 3 {
		for range 3 {
			if res, _ := l.Ratelimit(context.Background(), r); !res.Success {
				t.Fatalf("round %d: denied", i)
			}
		}
		l.sweep(now)
	}
	res, _ := l.Ratelimit(context.Background(), Request{Namespace: "n", Identifier: "replayed", Limit: 10, Duration: time.Minute, Time: past})
	if res.Current != 9 {
		t.Fatalf("after three sweeps in use: current %d, want 9 (a sweep reset the caller's counter)", res.Current)
	}
	l.sweep(now)
	l.sweep(now)
	if n := l.cells.len(); n != 0 {
		t.Fatalf("%d cells after two sweeps unused, want 0", n)
	}
}
