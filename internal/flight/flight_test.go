package flight

import (
	"context"
	"errors"
	"runtime"
	"slices"
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
				err := g.Do(t.Context(), "k", func() {
					calls.Add(1)
					time.Sleep(time.Second)
				})
				if err != nil {
					t.Errorf("Do: %v, want the call's end", err)
				}
			})
		}
		wg.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("%d calls, want 1", n)
		}
		_ = g.Do(t.Context(), "k", func() { calls.Add(1) }) // the first has ended: a new call
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
		if err := g.Do(ctx, 1, func() { time.Sleep(time.Second); finished.Store(true) }); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do: %v, want the caller's deadline", err)
		}
		if finished.Load() {
			t.Fatal("the call ended early")
		}
		if err := g.Do(t.Context(), 1, func() { t.Error("a second call started while the first was in flight") }); err != nil {
			t.Fatalf("the waiting caller gave up: %v", err)
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
			wg.Go(func() { _ = g.Do(t.Context(), k, func() { time.Sleep(time.Second) }) })
		}
		wg.Wait()
		if took := time.Since(start); took != time.Second {
			t.Fatalf("10 keys took %v, want the 1s of one call", took)
		}
	})
}

// TestDoResult checks what Do returns, and when, in each state of the
// call and of the group.
func TestDoResult(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // of the caller's context
		setup   func(g *Group[int])
		want    error
		took    time.Duration
		runs    bool // whether the caller's fn runs
	}{
		{name: "the call returns", timeout: time.Minute, want: nil, took: time.Second, runs: true},
		{name: "the caller's context ends first", timeout: 100 * time.Millisecond, want: context.DeadlineExceeded, took: 100 * time.Millisecond, runs: true},
		{name: "closed group", timeout: time.Minute, setup: func(g *Group[int]) { g.Close() }, want: ErrClosed},
		{
			name:    "closing group, the key in flight",
			timeout: time.Minute,
			setup: func(g *Group[int]) {
				go func() { _ = g.Do(context.Background(), 1, func() { time.Sleep(time.Hour) }) }()
				synctest.Wait() // the call is in flight
				go g.Close()
				synctest.Wait() // Close waits for it
			},
			want: ErrClosed,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var g Group[int]
				if tc.setup != nil {
					tc.setup(&g)
				}
				ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
				defer cancel()
				var ran atomic.Bool
				start := time.Now()
				err := g.Do(ctx, 1, func() { ran.Store(true); time.Sleep(time.Second) })
				took := time.Since(start)
				if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
					t.Errorf("Do: %v, want %v", err, tc.want)
				}
				if took != tc.took {
					t.Errorf("Do took %v, want %v", took, tc.took)
				}
				if ran.Load() != tc.runs {
					t.Errorf("fn ran: %v, want %v", ran.Load(), tc.runs)
				}
				g.Close()
			})
		})
	}
}

// TestCloseWaitsForCallsInFlight checks that Close returns once the calls
// started before it have returned, that their callers get their end, and
// that a second Close returns at once.
func TestCloseWaitsForCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Group[int]
		var finished atomic.Int32
		results := make(chan error, 3)
		for k, d := range []time.Duration{time.Second, 2 * time.Second} {
			go func() { results <- g.Do(t.Context(), k, func() { time.Sleep(d); finished.Add(1) }) }()
		}
		synctest.Wait() // both calls are in flight
		go func() { results <- g.Do(t.Context(), 0, func() { t.Error("a second call for key 0") }) }()
		synctest.Wait() // a caller has joined the call for key 0
		start := time.Now()
		g.Close()
		if took := time.Since(start); took != 2*time.Second {
			t.Fatalf("Close took %v, want the 2s of the longest call", took)
		}
		if n := finished.Load(); n != 2 {
			t.Fatalf("%d calls returned when Close did, want 2", n)
		}
		for range 3 {
			if err := <-results; err != nil {
				t.Errorf("a caller of a call started before Close: %v, want its end", err)
			}
		}
		g.Close()
		if took := time.Since(start); took != 2*time.Second {
			t.Fatalf("the second Close waited %v", took-2*time.Second)
		}
	})
}

// TestCloseRacesDo closes a Group while goroutines call Do in a loop,
// many times over (run it with -race): Close must not race the start of
// a call, and when it returns no call may run or start. Each goroutine
// stops at the ErrClosed it must then get.
func TestCloseRacesDo(t *testing.T) {
	const rounds, callers, keys = 300, 8, 4
	for round := range rounds {
		var g Group[int]
		var closed atomic.Bool // Close has returned
		var started, running atomic.Int64
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for i := 0; ; i++ {
					err := g.Do(t.Context(), (c+i)%keys, func() {
						if closed.Load() {
							t.Errorf("round %d: a call started after Close returned", round)
						}
						started.Add(1)
						running.Add(1)
						runtime.Gosched()
						running.Add(-1)
					})
					if err != nil {
						if !errors.Is(err, ErrClosed) {
							t.Errorf("round %d: Do: %v, want ErrClosed", round, err)
						}
						return
					}
				}
			})
		}
		for started.Load() < int64(round%callers) { // Close at various points of the start
			runtime.Gosched()
		}
		g.Close()
		if n := running.Load(); n != 0 {
			t.Errorf("round %d: %d calls running when Close returned", round, n)
		}
		closed.Store(true)
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}

// TestDoMany checks which keys one DoMany call leads, and when it returns,
// with other calls in flight for some of its keys.
func TestDoMany(t *testing.T) {
	for _, tc := range []struct {
		name     string
		keys     []int
		inFlight map[int]time.Duration // calls of Do in flight, by key, for this long
		timeout  time.Duration         // of the caller's context
		closed   bool
		led      []int // the indexes fn is given; nil: fn does not run
		want     error
		took     time.Duration
	}{
		{name: "no key in flight, one key twice", keys: []int{1, 2, 2, 3}, led: []int{0, 1, 3}, took: time.Second},
		{name: "a key in flight for longer", keys: []int{1, 2}, inFlight: map[int]time.Duration{2: 3 * time.Second},
			led: []int{0}, took: 3 * time.Second},
		{name: "every key in flight", keys: []int{1, 2}, inFlight: map[int]time.Duration{1: time.Second, 2: 2 * time.Second},
			took: 2 * time.Second},
		{name: "the caller's context ends first", keys: []int{1, 2}, timeout: 100 * time.Millisecond,
			led: []int{0, 1}, want: context.DeadlineExceeded, took: 100 * time.Millisecond},
		{name: "closed group", keys: []int{1}, closed: true, want: ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var g Group[int]
				for k, d := range tc.inFlight {
					go func() { _ = g.Do(context.Background(), k, func() { time.Sleep(d) }) }()
				}
				synctest.Wait() // the calls are in flight
				if tc.closed {
					g.Close()
				}
				ctx := t.Context()
				if tc.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				var led []int
				start := time.Now()
				err := g.DoMany(ctx, tc.keys, func(l []int) { led = l; time.Sleep(time.Second) })
				took := time.Since(start)
				if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
					t.Errorf("DoMany: %v, want %v", err, tc.want)
				}
				if took != tc.took {
					t.Errorf("DoMany took %v, want %v", took, tc.took)
				}
				if tc.want == nil {
					// Every key's call has returned: a new one starts.
					ran := 0
					for _, k := range tc.keys {
						_ = g.Do(t.Context(), k, func() { ran++ })
					}
					if ran != len(tc.keys) && !tc.closed {
						t.Errorf("%d new calls after DoMany, want %d", ran, len(tc.keys))
					}
				}
				g.Close()
				if !slices.Equal(led, tc.led) {
					t.Errorf("fn led %v, want %v", led, tc.led)
				}
			})
		})
	}
}
