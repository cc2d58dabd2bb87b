package flight

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConcurrentCallersShareOneCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Group[string]
		var calls atomic.Int32
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				ok := g.Do(t.Context(), "k", func() {
					calls.Add(1)
					time.Sleep(time.Second)
				})
				if !ok {
					t.Error("Do returned before the call ended")
				}
			})
		}
		wg.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("%d calls, want 1", n)
		}
		g.Do(t.Context(), "k", func() { calls.Add(1) }) // the first has ended: a new call
		if n := calls.Load(); n != 2 {
			t.Fatalf("%d calls after the first ended, want 2", n)
		}
	})
}

func TestCancelledCallerDoesNotCancelTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Group[int]
		var finished atomic.Bool
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if g.Do(ctx, 1, func() { time.Sleep(time.Second); finished.Store(true) }) {
			t.Fatal("Do reported the call done before it was")
		}
		if finished.Load() {
			t.Fatal("the call ended early")
		}
		if !g.Do(t.Context(), 1, func() { t.Error("a second call started while the first was in flight") }) {
			t.Fatal("the waiting caller gave up")
		}
		if !finished.Load() {
			t.Fatal("the call did not finish")
		}
		g.Wait()
	})
}

func TestKeysAreIndependent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Group[int]
		start := time.Now()
		var wg sync.WaitGroup
		for k := range 10 {
			wg.Go(func() { g.Do(t.Context(), k, func() { time.Sleep(time.Second) }) })
		}
		wg.Wait()
		if took := time.Since(start); took != time.Second {
			t.Fatalf("10 keys took %v, want the 1s of one call", took)
		}
	})
}
