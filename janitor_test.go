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
