package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// errLostReply stands for a call that reached the origin and ran there, but
// whose reply never came back (a timeout, a reset connection).
var errLostReply = errors.New("test: reply lost")

// faultyOrigin runs every call on a real in-memory store, with faults a
// test switches on: replies of Apply lost after the write landed, decisions
// held until released (and then run, whether or not the caller still
// waits), decisions that time out for the caller and land later, and cells
// the origin refuses.
type faultyOrigin struct {
	*memory.Store
	lostApplies atomic.Int32 // the next this many Apply calls land, then fail
	holdDecide  atomic.Bool  // Decide waits for release before it runs
	lateDecide  atomic.Bool  // Decide fails at its deadline and runs after release
	refuse      string       // identifier whose cells Apply refuses
	unavailable string       // identifier whose cells Apply cannot reach (their shard is down)

	release chan struct{}
	late    sync.WaitGroup
	decided chan struct{} // a held or late decision ran
}

func newFaultyOrigin() *faultyOrigin {
	return &faultyOrigin{Store: memory.New(nil), release: make(chan struct{}), decided: make(chan struct{}, 16)}
}

func (f *faultyOrigin) Apply(ctx context.Context, ds []origin.Delta) ([]origin.Total, error) {
	var ok []origin.Delta
	failed := map[int]error{}
	var index []int
	for i, d := range ds {
		if f.refuse != "" && d.Cell.Identifier == f.refuse {
			failed[i] = errors.New("test: WRONGTYPE")
			continue
		}
		if f.unavailable != "" && d.Cell.Identifier == f.unavailable {
			failed[i] = fmt.Errorf("test: shard down: %w", origin.ErrUnavailable)
			continue
		}
		ok = append(ok, d)
		index = append(index, i)
	}
	totals, err := f.Store.Apply(ctx, ok)
	if err != nil {
		return nil, err
	}
	if f.lostApplies.Add(-1) >= 0 {
		return nil, errLostReply
	}
	out := make([]origin.Total, len(ds))
	for j, i := range index {
		out[i] = totals[j]
	}
	if len(failed) > 0 {
		return out, &origin.CellErrors{Failed: failed}
	}
	return out, nil
}

func (f *faultyOrigin) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	switch {
	case f.holdDecide.Load():
		<-f.release
		defer f.ran()
		return f.Store.Decide(context.Background(), c)
	case f.lateDecide.Load():
		f.late.Go(func() {
			<-f.release
			_, _ = f.Store.Decide(context.Background(), c)
			f.ran()
		})
		<-ctx.Done()
		return origin.Verdict{}, ctx.Err()
	}
	return f.Store.Decide(ctx, c)
}

// ran signals that a held or late decision ran, if nobody has yet to hear
// of an earlier one.
func (f *faultyOrigin) ran() {
	select {
	case f.decided <- struct{}{}:
	default:
	}
}

// total returns the origin's count of r's current cell.
func (f *faultyOrigin) total(t *testing.T, r sluice.Request) int64 {
	t.Helper()
	d := r.Duration.Milliseconds()
	counts, err := f.Load(context.Background(), origin.Key{Workspace: r.Workspace, Namespace: r.Namespace, Identifier: r.Identifier, Duration: r.Duration}, r.Time.UnixMilli()/d)
	if err != nil {
		t.Fatal(err)
	}
	return counts.Current
}

// spend sends r n times and returns how many were admitted.
func spend(t *testing.T, l *sluice.Limiter, r sluice.Request, n int) int64 {
	t.Helper()
	var admitted int64
	for range n {
		res, err := l.Ratelimit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if res.Success {
			admitted += r.Cost
		}
	}
	return admitted
}

// TestLostReplayRepliesCountOnce loses the reply of the first replays after
// they landed: the limiter sends them again, and the origin counts every
// admitted unit once.
func TestLostReplayRepliesCountOnce(t *testing.T) {
	f := newFaultyOrigin()
	f.lostApplies.Store(3)
	l := newLimiter(t, sluice.Config{Origin: f, OriginMargin: -1, ReplayInterval: time.Millisecond})
	r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 1000, Duration: time.Hour, Cost: 1, Time: time.Now()}
	admitted := spend(t, l, r, 50)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.total(t, r); got != admitted {
		t.Fatalf("the origin counts %d for %d admitted units (lost replies were counted again)", got, admitted)
	}
}

// TestCallerThatGivesUpCountsOnce holds an origin decision while its
// caller's context ends: the caller decides locally (and admits), then the
// origin runs the decision and admits the same request too. The origin
// must still count it once.
func TestCallerThatGivesUpCountsOnce(t *testing.T) {
	f := newFaultyOrigin()
	l := newLimiter(t, sluice.Config{Origin: f, OriginMargin: 0.5, RefreshAfter: time.Hour})
	r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 10, Duration: time.Hour, Cost: 1, Time: time.Now()}
	admitted := spend(t, l, r, 5) // local: the next units are within the margin
	f.holdDecide.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	res, err := l.Ratelimit(ctx, r)
	cancel()
	if err != nil || !res.Success {
		t.Fatalf("the caller that gave up: %+v, %v; want a local admission", res, err)
	}
	admitted++
	close(f.release) // the origin now admits the abandoned request as well
	<-f.decided
	f.holdDecide.Store(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.total(t, r); got != admitted {
		t.Fatalf("the origin counts %d for %d admitted units", got, admitted)
	}
}

// TestLateDecisionCountsOnce has every origin decision time out for the
// limiter and land at the origin later, after the limiter decided the
// requests locally and replayed them: the late decisions find a newer
// count of their writer and admit nothing, so nothing counts twice.
func TestLateDecisionCountsOnce(t *testing.T) {
	f := newFaultyOrigin()
	f.lateDecide.Store(true)
	l, h := newDriven(t, sluice.Config{Origin: f, OriginMargin: 1, OriginTimeout: 10 * time.Millisecond,
		OriginBackoff: time.Nanosecond, RefreshAfter: time.Hour, ReplayInterval: time.Millisecond}, drive.Options{})
	r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 100, Duration: time.Hour, Cost: 1, Time: time.Now()}
	admitted := spend(t, l, r, 20)
	h.Flush()
	waitFor(t, func() bool { return f.total(t, r) == admitted })
	close(f.release)
	f.late.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.total(t, r); got != admitted {
		t.Fatalf("the origin counts %d for %d admitted units (late decisions counted again)", got, admitted)
	}
}

// TestRefusedCellDoesNotHoldOthersBack has the origin refuse one cell on
// every replay: the other cells of the same calls are counted once, the
// refused one is retried a few times, then dropped and reported.
func TestRefusedCellDoesNotHoldOthersBack(t *testing.T) {
	f := newFaultyOrigin()
	f.refuse = "bad"
	obs := &recorder{reads: map[string]int{}}
	l, h := newDriven(t, sluice.Config{Origin: f, OriginMargin: -1, ReplayInterval: time.Millisecond, Observer: obs},
		drive.Options{})
	good := sluice.Request{Namespace: "n", Identifier: "good", Limit: 1000, Duration: time.Hour, Cost: 1, Time: time.Now()}
	bad := good
	bad.Identifier = "bad"
	var admitted int64
	for range 10 {
		admitted += spend(t, l, good, 1)
		spend(t, l, bad, 1)
		h.Flush()
	}
	waitFor(t, func() bool { return obs.droppedOf("refused") > 0 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.total(t, good); got != admitted {
		t.Fatalf("the origin counts %d of the good cell for %d admitted units", got, admitted)
	}
	if got := obs.droppedOf("refused"); got < 1 || got > 10 {
		t.Fatalf("%d refused increments reported, want between 1 and 10", got)
	}
}

// TestUnreachableCellDroppedAsExpired has the origin fail one cell's
// writes as unavailable (its Redis Cluster master down) while it applies
// the others: the cell is retried until its window has passed, then
// dropped and reported as expired, not as refused (the origin never
// refused it); the others are counted once.
func TestUnreachableCellDroppedAsExpired(t *testing.T) {
	f := newFaultyOrigin()
	f.unavailable = "frozen"
	obs := &recorder{reads: map[string]int{}}
	l, h := newDriven(t, sluice.Config{Origin: f, OriginMargin: -1, ReplayInterval: time.Millisecond, Observer: obs},
		drive.Options{})
	good := sluice.Request{Namespace: "n", Identifier: "good", Limit: 1000, Duration: 20 * time.Millisecond, Cost: 1, Time: time.Now()}
	frozen := good
	frozen.Identifier = "frozen"
	good.Duration = time.Hour
	admitted := spend(t, l, good, 1)
	spend(t, l, frozen, 1)
	h.Flush()
	waitFor(t, func() bool { return obs.droppedOf("expired") > 0 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.total(t, good); got != admitted {
		t.Fatalf("the origin counts %d of the good cell for %d admitted units", got, admitted)
	}
	if got := obs.droppedOf("refused"); got != 0 {
		t.Fatalf("%d increments of an unreachable cell reported refused", got)
	}
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// hangingOrigin never answers: every call waits for its context to end.
type hangingOrigin struct{ calls atomic.Int32 }

func (h *hangingOrigin) Load(ctx context.Context, _ origin.Key, _ int64) (origin.Counts, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return origin.Counts{}, ctx.Err()
}

func (h *hangingOrigin) LoadMany(ctx context.Context, _ []origin.Cell) ([]origin.Counts, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

func (h *hangingOrigin) Apply(ctx context.Context, _ []origin.Delta) ([]origin.Total, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

func (h *hangingOrigin) Withdraw(ctx context.Context, _ origin.Cell, _ origin.Writer) error {
	h.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (h *hangingOrigin) Decide(ctx context.Context, _ origin.Check) (origin.Verdict, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return origin.Verdict{}, ctx.Err()
}

// TestOneDeadlinePerRequest sends a request that needs both a hydration
// and an origin decision to an origin that never answers: together they
// wait OriginTimeout, not one timeout each (virtual time).
func TestOneDeadlinePerRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 250 * time.Millisecond
		l, err := sluice.New(sluice.Config{Origin: &hangingOrigin{}, OriginTimeout: timeout, OriginMargin: 1, FlushTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 10, Duration: time.Hour, Cost: 1}
		start := time.Now()
		res, err := l.Ratelimit(context.Background(), r)
		if elapsed := time.Since(start); err != nil || !res.Success || elapsed > timeout {
			t.Errorf("hydration and decision on a hanging origin: %+v, %v after %v; want a local admission within %v", res, err, elapsed, timeout)
		}
		_ = l.Close()
	})
}

// TestDenialNeverWaits denies requests whose local view denies them
// already, on cold cells, with an origin that never answers: none waits,
// and none calls the origin (virtual time).
func TestDenialNeverWaits(t *testing.T) {
	tests := []struct {
		name string
		r    sluice.Request
	}{
		{"cost above the limit", sluice.Request{Namespace: "n", Identifier: "a", Limit: 5, Duration: time.Hour, Cost: 6}},
		{"a limit of zero", sluice.Request{Namespace: "n", Identifier: "b", Limit: 0, Duration: time.Hour, Cost: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := &hangingOrigin{}
				l, err := sluice.New(sluice.Config{Origin: h, FlushTimeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				start := time.Now()
				res, err := l.Ratelimit(context.Background(), tc.r)
				if err != nil || res.Success || time.Since(start) != 0 || h.calls.Load() != 0 {
					t.Errorf("%+v, %v after %v and %d origin calls; want a denial at once with no call", res, err, time.Since(start), h.calls.Load())
				}
			})
		})
	}
}

// TestDenialAtRolloverNeverWaits fills a counter's window, then asks at the
// start of the next one, where the new cell is cold but the previous one
// weighs the whole limit: the denial is local, without a hydration.
func TestDenialAtRolloverNeverWaits(t *testing.T) {
	store := &countingOrigin{Origin: memory.New(nil)}
	l := newLimiter(t, sluice.Config{Origin: store, RefreshAfter: time.Hour})
	const d = time.Second
	for i := range 3 {
		if res, _ := l.Ratelimit(context.Background(), req("u", 3, 1, d, at(10_100+int64(i)))); !res.Success {
			t.Fatalf("unit %d denied", i+1)
		}
	}
	loads := store.loads.Load()
	res, err := l.Ratelimit(context.Background(), req("u", 3, 1, d, at(11_000)))
	if err != nil || res.Success {
		t.Fatalf("first request of the next window: %+v, %v; want a denial", res, err)
	}
	if n := store.loads.Load() - loads; n != 0 {
		t.Fatalf("the denial read the origin %d times, want 0", n)
	}
}

// TestCloseWithinFlushTimeout closes a limiter with many cells to replay to
// an origin that never answers: Close gives up after FlushTimeout, whatever
// the number of batches, and reports what it could not replay (virtual
// time).
func TestCloseWithinFlushTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			flush         = 50 * time.Millisecond
			originTimeout = 250 * time.Millisecond
		)
		obs := &recorder{reads: map[string]int{}}
		l, err := sluice.New(sluice.Config{Origin: &hangingOrigin{}, FlushTimeout: flush, ReplayTimeout: time.Second,
			OriginTimeout: originTimeout, ReplayBatch: 2, ReplayWorkers: 1, OriginMargin: -1, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			r := sluice.Request{Namespace: "n", Identifier: string(rune('a' + i)), Limit: 10, Duration: time.Hour, Cost: 1}
			if _, err := l.Ratelimit(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		err = l.Close()
		if elapsed := time.Since(start); elapsed > flush+originTimeout {
			t.Errorf("Close took %v, want at most FlushTimeout %v (after in-flight calls of at most OriginTimeout)", elapsed, flush)
		}
		if !errors.Is(err, sluice.ErrNotFlushed) {
			t.Errorf("Close: %v, want ErrNotFlushed", err)
		}
		if got := obs.droppedOf("close"); got != 20 {
			t.Errorf("%d increments reported dropped at close, want 20", got)
		}
	})
}
