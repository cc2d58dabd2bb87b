package sluice_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// slowOrigin is an origin a network latency away: every call lands half
// way through it and answers at its end, whatever its caller does. A
// caller that gives up gets ctx.Err() at once; its call lands all the same,
// as a command already on the wire does.
type slowOrigin struct {
	*memory.Store
	latency time.Duration
}

// slowCall runs f as a call of s: f runs half way through the latency
// whatever the caller does; the caller gets its answer at the end of it,
// or ctx.Err() if ctx ends first.
func slowCall[T any](s *slowOrigin, ctx context.Context, f func() (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		time.Sleep(s.latency / 2)
		v, err := f()
		time.Sleep(s.latency / 2)
		answered <- answer{v, err}
	}()
	select {
	case a := <-answered:
		return a.v, a.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func (s *slowOrigin) Load(ctx context.Context, k origin.Key, seq int64) (origin.Counts, error) {
	return slowCall(s, ctx, func() (origin.Counts, error) { return s.Store.Load(context.Background(), k, seq) })
}

func (s *slowOrigin) LoadMany(ctx context.Context, cells []origin.Cell) ([]origin.Counts, error) {
	return slowCall(s, ctx, func() ([]origin.Counts, error) { return s.Store.LoadMany(context.Background(), cells) })
}

func (s *slowOrigin) Apply(ctx context.Context, ds []origin.Delta) ([]origin.Total, error) {
	return slowCall(s, ctx, func() ([]origin.Total, error) { return s.Store.Apply(context.Background(), ds) })
}

func (s *slowOrigin) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	return slowCall(s, ctx, func() (origin.Verdict, error) { return s.Store.Decide(context.Background(), c) })
}

func (s *slowOrigin) Withdraw(ctx context.Context, c origin.Cell, w origin.Writer) error {
	_, err := slowCall(s, ctx, func() (struct{}, error) { return struct{}{}, s.Store.Withdraw(context.Background(), c, w) })
	return err
}

// cancellingCaller is one request of TestOneNodeExactWhateverCallersDo: it
// starts after start and gives up after timeout (0: never).
type cancellingCaller struct {
	counter int
	start   time.Duration
	timeout time.Duration
}

// TestOneNodeExactWhateverCallersDo is the reference model with callers
// that give up: one limiter, the only writer of its origin, 30 ms away;
// concurrent callers of a few counters (cost 1, one limit per counter),
// some of which give up after 1–100 ms while their request waits on the
// origin. With every request of cost 1 and one limit, the model admits
// exactly min(limit, requests) of a counter in one window, whatever order
// it decides them in: the node must admit exactly that many with single
// requests, and the origin must hold exactly what it admitted once Close
// has flushed. A batch whose caller gives up while its reservation is in
// flight is denied (see RatelimitMany): with batches, the node admits at
// most min(limit, requests), and at least that less the batches given up.
func TestOneNodeExactWhateverCallersDo(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limits := rapid.SliceOfN(rapid.Int64Range(1, 20), 1, 4).Draw(rt, "limits")
		var callers []cancellingCaller
		for k, limit := range limits {
			for range rapid.Int64Range(limit, 2*limit+5).Draw(rt, fmt.Sprintf("requests %d", k)) {
				c := cancellingCaller{counter: k, start: time.Duration(rapid.IntRange(0, 100).Draw(rt, "start ms")) * time.Millisecond}
				if rapid.Bool().Draw(rt, "gives up?") {
					c.timeout = time.Duration(rapid.IntRange(1, 100).Draw(rt, "timeout ms")) * time.Millisecond
				}
				callers = append(callers, c)
			}
		}
		batches := rapid.Bool().Draw(rt, "in batches of two?")
		admitted, held := runCancellingCallers(t, limits, callers, batches)
		for k, limit := range limits {
			n, gaveUp := int64(0), int64(0)
			for _, c := range callers {
				if c.counter == k {
					n++
					if batches && c.timeout > 0 {
						gaveUp++
					}
				}
			}
			want := min(limit, n)
			switch {
			case held[k] != admitted[k]:
				rt.Fatalf("counter %d: admitted %d, origin holds %d", k, admitted[k], held[k])
			case admitted[k] > want || admitted[k] < want-gaveUp:
				rt.Fatalf("counter %d (limit %d, %d requests, %d batches that may give up): admitted %d; want %d, or down to %d with batches",
					k, limit, n, gaveUp, admitted[k], want, want-gaveUp)
			}
		}
	})
}

// runCancellingCallers runs callers against one limiter over a slow origin
// in a synctest bubble and returns, per counter, the requests it admitted
// and the origin's total once the limiter is closed. With batches, each
// caller asks for its counter in a batch with a counter of its own that
// never runs out, so the batch path is taken.
func runCancellingCallers(t *testing.T, limits []int64, callers []cancellingCaller, batches bool) (admitted, held []int64) {
	admitted, held = make([]int64, len(limits)), make([]int64, len(limits))
	synctest.Test(t, func(t *testing.T) {
		so := &slowOrigin{Store: memory.New(nil), latency: 30 * time.Millisecond}
		l, err := sluice.New(sluice.Config{Origin: so})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r := func(k int, id string, limit int64) sluice.Request {
			return sluice.Request{Namespace: "n", Identifier: id, Limit: limit, Duration: time.Hour, Cost: 1, Time: start}
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, c := range callers {
			wg.Go(func() {
				time.Sleep(c.start)
				ctx, cancel := context.WithCancel(context.Background())
				if c.timeout > 0 {
					ctx, cancel = context.WithTimeout(ctx, c.timeout)
				}
				defer cancel()
				q := r(c.counter, fmt.Sprint("k", c.counter), limits[c.counter])
				var ok bool
				if batches {
					res, err := l.RatelimitMany(ctx, []sluice.Request{q, r(-1, fmt.Sprint("own", i), 1000)})
					ok = err == nil && res[0].Success && res[1].Success
				} else {
					res, err := l.Ratelimit(ctx, q)
					ok = err == nil && res.Success
				}
				if ok {
					mu.Lock()
					admitted[c.counter]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		time.Sleep(time.Second) // every call in flight has landed
		for k := range limits {
			key := origin.Key{Namespace: "n", Identifier: fmt.Sprint("k", k), Duration: time.Hour}
			c, err := so.Store.Load(context.Background(), key, start.UnixMilli()/time.Hour.Milliseconds())
			if err != nil {
				t.Fatal(err)
			}
			held[k] = c.Current
		}
	})
	return admitted, held
}
