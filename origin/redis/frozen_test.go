package redis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/origin"
)

// One master of a Redis Cluster frozen (SIGSTOP) on a private cluster of
// three masters and no replica, so that nothing fails it over: the calls on
// the other masters' cells go on and are answered at once, and only the
// frozen master's cells fail, until it thaws. Every phase is bounded in
// time; speeds are asserted only against the origin timeout.

// frozenTimeout is the origin's Timeout in these tests.
const frozenTimeout = 200 * time.Millisecond

// frozenFixture is an origin on a private 3-master cluster and keys on each
// master. Master 0 is the one the tests freeze.
type frozenFixture struct {
	pc      *privateCluster
	client  *goredis.ClusterClient
	o       *Origin
	rec     *recorder
	frozen  []origin.Key // on master 0
	healthy []origin.Key // on masters 1 and 2
}

func newFrozenFixture(t *testing.T) *frozenFixture {
	t.Helper()
	if testing.Short() {
		t.Skip("freezes a master of a Redis Cluster of its own")
	}
	pc := startPrivateCluster(t, 3, false)
	client := pc.client()
	rec := &recorder{}
	f := &frozenFixture{pc: pc, client: client, rec: rec, o: newOrigin(t, Config{
		Client: client, Observer: rec, Timeout: frozenTimeout,
		Breaker: BreakerConfig{OpenTimeout: 500 * time.Millisecond},
	})}
	ws := workspace(t)
	f.frozen = pc.keysOn(0, 3, ws, "frozen", time.Minute)
	f.healthy = append(pc.keysOn(1, 3, ws, "frozen", time.Minute), pc.keysOn(2, 3, ws, "frozen", time.Minute)...)
	return f
}

// cells returns one cell of sequence seq per key, healthy and frozen ones
// interleaved, and which of them live on the frozen master.
func (f *frozenFixture) cells(seq int64) (cells []origin.Cell, onFrozen []bool) {
	for i := range max(len(f.healthy), len(f.frozen)) {
		if i < len(f.healthy) {
			cells, onFrozen = append(cells, origin.Cell{Key: f.healthy[i], Sequence: seq}), append(onFrozen, false)
		}
		if i < len(f.frozen) {
			cells, onFrozen = append(cells, origin.Cell{Key: f.frozen[i], Sequence: seq}), append(onFrozen, true)
		}
	}
	return cells, onFrozen
}

// probeStats is what the calls on the healthy masters got.
type probeStats struct {
	calls   int
	errs    []error
	slowest time.Duration
}

// probeHealthy loads and decides the healthy keys' cells of sequence seq,
// one after another, until stop is closed, and sends what they got.
func (f *frozenFixture) probeHealthy(seq int64, stop <-chan struct{}) <-chan probeStats {
	out := make(chan probeStats, 1)
	go func() {
		var s probeStats
		ctx := context.Background()
		for i := 0; ; i++ {
			select {
			case <-stop:
				out <- s
				return
			default:
			}
			k := f.healthy[i%len(f.healthy)]
			began := time.Now()
			var err error
			if i%2 == 0 {
				_, err = f.o.Load(ctx, k, seq)
			} else {
				_, err = f.o.Decide(ctx, origin.Check{Key: k, Seq: seq, Elapsed: 1, Writer: newWriter(), Asks: asks(1<<40, 1)})
			}
			s.calls++
			s.slowest = max(s.slowest, time.Since(began))
			if err != nil {
				s.errs = append(s.errs, err)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return out
}

// TestClusterFrozenMasterCostsOnlyItsCells freezes one master of three
// while Applies whose cells live on all three run, and Loads and Decides
// run on the other two: those never fail and never wait for the frozen
// master (none takes the origin timeout), and every Apply applies the
// healthy cells and names exactly the frozen master's cells in an
// *origin.CellErrors, each unavailable. Once the master thaws, the same
// deltas are applied, and Redis holds every cell's count once.
func TestClusterFrozenMasterCostsOnlyItsCells(t *testing.T) {
	f := newFrozenFixture(t)
	ctx := context.Background()
	cells, onFrozen := f.cells(1000)
	writers := make([]origin.Writer, len(cells))
	for i := range writers {
		writers[i] = newWriter()
	}
	deltas := func(sent int64) []origin.Delta {
		ds := make([]origin.Delta, len(cells))
		for i, c := range cells {
			ds[i] = origin.Delta{Cell: c, Writer: writers[i], Sent: sent}
		}
		return ds
	}
	// The client learns the cluster's slot map before the freeze, and
	// nothing else: no Decide has run.
	if _, err := f.o.Apply(ctx, deltas(1)); err != nil {
		t.Fatalf("Apply before the freeze: %v", err)
	}

	thaw := f.pc.freeze(0)
	stop := make(chan struct{})
	probe := f.probeHealthy(2000, stop)
	sent := int64(1)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		sent++
		totals, err := f.o.Apply(ctx, deltas(sent))
		if msg := checkFrozenApply(err, totals, onFrozen, sent); msg != "" {
			close(stop)
			<-probe
			t.Fatalf("Apply %d with master 0 frozen: %s", sent, msg)
		}
	}
	close(stop)
	stats := <-probe
	t.Logf("with master 0 frozen: %d Applies; %d calls on the healthy masters, slowest %v", sent-1, stats.calls, stats.slowest)
	if len(stats.errs) > 0 {
		t.Errorf("%d of %d calls on the healthy masters failed; first: %v", len(stats.errs), stats.calls, stats.errs[0])
	}
	if stats.slowest >= frozenTimeout {
		t.Errorf("a call on a healthy master took %v: it waited for the frozen master (timeout %v)", stats.slowest, frozenTimeout)
	}

	thaw()
	eventually(t, 15*time.Second, "an Apply to succeed on every master", func() bool {
		_, err := f.o.Apply(ctx, deltas(sent))
		return err == nil
	})
	for i, c := range cells {
		got, err := f.client.HGet(ctx, CellKey(c), totalField).Int64()
		if err != nil || got != sent {
			t.Errorf("cell %d (frozen master: %v) holds %d, %v in Redis; want %d, its writer's count, once", i, onFrozen[i], got, err, sent)
		}
	}
}

// checkFrozenApply returns what is wrong with the result of an Apply of
// count sent in every cell while the master of the cells marked onFrozen
// is frozen ("" if nothing).
func checkFrozenApply(err error, totals []origin.Total, onFrozen []bool, sent int64) string {
	var cellErrs *origin.CellErrors
	if !errors.As(err, &cellErrs) {
		return fmt.Sprintf("err = %v, want an *origin.CellErrors", err)
	}
	var want []int
	for i, frozen := range onFrozen {
		if frozen {
			want = append(want, i)
		}
	}
	if got := slices.Sorted(maps.Keys(cellErrs.Failed)); !slices.Equal(got, want) {
		return fmt.Sprintf("failed cells %v, want those of the frozen master %v: %v", got, want, err)
	}
	for i, cellErr := range cellErrs.Failed {
		if !errors.Is(cellErr, origin.ErrUnavailable) {
			return fmt.Sprintf("cell %d: %v, want an error wrapping origin.ErrUnavailable", i, cellErr)
		}
	}
	for i, frozen := range onFrozen {
		if !frozen && totals[i].Count != sent {
			return fmt.Sprintf("total of healthy cell %d is %d, want %d", i, totals[i].Count, sent)
		}
	}
	return ""
}

// TestClusterBreakerPerMaster freezes one master of three and calls it
// until its breaker opens: the other masters' breakers stay closed and
// their cells are served, the observer sees the frozen master's breaker
// open (and the origin's state, the most severe of the masters', with
// it), and calls on it are refused at once, naming it. Once it thaws, its
// breaker closes again.
func TestClusterBreakerPerMaster(t *testing.T) {
	f := newFrozenFixture(t)
	ctx := context.Background()
	frozenAddr := f.pc.addrs[0]
	for _, k := range append(slices.Clone(f.frozen), f.healthy...) {
		if _, err := f.o.Load(ctx, k, 1); err != nil {
			t.Fatalf("Load before the freeze: %v", err)
		}
	}
	if got := f.o.BreakerStates(); len(got) != 3 || slices.ContainsFunc(slices.Collect(maps.Values(got)), func(s BreakerState) bool { return s != BreakerClosed }) {
		t.Fatalf("BreakerStates before the freeze = %v, want three closed breakers", got)
	}

	thaw := f.pc.freeze(0)
	for i := 0; f.o.BreakerStates()[frozenAddr] != BreakerOpen; i++ {
		if i == 20 {
			t.Fatalf("the frozen master's breaker is %v after %d calls", f.o.BreakerStates()[frozenAddr], i)
		}
		if _, err := f.o.Load(ctx, f.frozen[i%len(f.frozen)], 1); !errors.Is(err, origin.ErrUnavailable) {
			t.Fatalf("Load on the frozen master: %v, want ErrUnavailable", err)
		}
		k := f.healthy[i%len(f.healthy)]
		if _, err := f.o.Load(ctx, k, 1); err != nil {
			t.Fatalf("Load on a healthy master while master 0 is frozen: %v", err)
		}
	}
	_, err := f.o.Load(ctx, f.frozen[0], 1)
	if !errors.Is(err, origin.ErrUnavailable) || !strings.Contains(err.Error(), "circuit breaker is open") || !strings.Contains(err.Error(), frozenAddr) {
		t.Fatalf("Load on the frozen master with its breaker open: %v, want a refusal naming %s", err, frozenAddr)
	}
	states := f.o.BreakerStates()
	for addr, s := range states {
		if want := map[bool]BreakerState{true: BreakerOpen, false: BreakerClosed}[addr == frozenAddr]; s != want {
			t.Errorf("breaker of %s is %v, want %v (states %v)", addr, s, want, states)
		}
	}
	if s := f.o.BreakerState(); s != BreakerOpen {
		t.Errorf("BreakerState = %v, want open (one master's is)", s)
	}
	if got := f.rec.masterStates(); !slices.Equal(slices.Collect(maps.Keys(got)), []string{frozenAddr}) {
		t.Errorf("master breaker changes %v, want the frozen master's alone", got)
	}
	if got := f.rec.states(); len(got) != 1 || got[0] != [2]BreakerState{BreakerClosed, BreakerOpen} {
		t.Errorf("origin breaker changes %v, want closed→open", got)
	}
	if to, all := f.rec.callsTo(frozenAddr); to == 0 || to == all {
		t.Errorf("%d of %d observed calls name the frozen master, want some but not all", to, all)
	}

	thaw()
	eventually(t, 15*time.Second, "a Load on the thawed master to succeed", func() bool {
		_, err := f.o.Load(ctx, f.frozen[0], 1)
		return err == nil
	})
	if s := f.o.BreakerState(); s != BreakerClosed {
		t.Errorf("BreakerState after the thaw = %v, want closed", s)
	}
	if got := f.rec.masterStates()[frozenAddr]; got[len(got)-1] != [2]BreakerState{BreakerHalfOpen, BreakerClosed} {
		t.Errorf("the thawed master's breaker changes %v, want them to end half-open→closed", got)
	}
}

// TestClusterColdStartWithFrozenMaster starts an origin on a cluster one of
// whose masters is frozen, before its client knows the slot map: the first
// calls, at once, on the other masters' cells all succeed without waiting
// for the frozen master (the client loads the map from the nodes in a
// random order, so a load that asks the frozen node first hangs).
func TestClusterColdStartWithFrozenMaster(t *testing.T) {
	f := newFrozenFixture(t)
	f.pc.freeze(0)
	ctx := context.Background()
	type result struct {
		took time.Duration
		err  error
	}
	results := make([]result, 2*len(f.healthy))
	var wg sync.WaitGroup
	for i := range results {
		k := f.healthy[i%len(f.healthy)]
		wg.Go(func() {
			began := time.Now()
			var err error
			if i < len(f.healthy) {
				_, err = f.o.Load(ctx, k, 1)
			} else {
				_, err = f.o.Decide(ctx, origin.Check{Key: k, Seq: 1, Elapsed: 1, Writer: newWriter(), Asks: asks(10, 1)})
			}
			results[i] = result{time.Since(began), err}
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.err != nil || r.took >= frozenTimeout {
			t.Errorf("call %d on a healthy master, among the first: took %v, %v; want a success that does not wait for the frozen master", i, r.took, r.err)
		}
	}
	if _, err := f.o.Load(ctx, f.frozen[0], 1); !errors.Is(err, origin.ErrUnavailable) {
		t.Errorf("Load on the frozen master: %v, want ErrUnavailable", err)
	}
}

// TestClusterFailoverDropsFormerMasterBreaker freezes a master that has a
// replica until the cluster promotes the replica: the frozen master's
// breaker opens, calls on its slots then go to the new master's breaker,
// and the former master's is dropped, so that neither BreakerStates nor
// the origin's state keep reporting a master that serves nothing.
func TestClusterFailoverDropsFormerMasterBreaker(t *testing.T) {
	if testing.Short() {
		t.Skip("fails over a master of a Redis Cluster of its own")
	}
	pc := startPrivateCluster(t, 3, true)
	rec := &recorder{}
	o := newOrigin(t, Config{Client: pc.client(), Observer: rec, Timeout: frozenTimeout,
		Breaker: BreakerConfig{OpenTimeout: 500 * time.Millisecond}})
	ctx := context.Background()
	ws := workspace(t)
	frozen, healthy := pc.keysOn(0, 1, ws, "failover", time.Minute)[0], pc.keysOn(1, 1, ws, "failover", time.Minute)[0]
	for _, k := range []origin.Key{frozen, healthy} {
		if _, err := o.Load(ctx, k, 1); err != nil {
			t.Fatalf("Load before the freeze: %v", err)
		}
	}
	former, promoted := pc.addrs[0], pc.addrs[pc.masters]
	pc.freeze(0) // until the test ends: the replica takes over
	for i := 0; o.BreakerStates()[former] != BreakerOpen; i++ {
		if i == 20 {
			t.Fatalf("the frozen master's breaker is %v after %d calls", o.BreakerStates()[former], i)
		}
		_, _ = o.Load(ctx, frozen, 1)
		if _, err := o.Load(ctx, healthy, 1); err != nil {
			t.Fatalf("Load on a healthy master: %v", err)
		}
	}
	eventually(t, 30*time.Second, "a Load on the frozen master's slot to succeed (failover)", func() bool {
		_, err := o.Load(ctx, frozen, 1)
		return err == nil
	})
	states := o.BreakerStates()
	if _, ok := states[former]; ok || states[promoted] != BreakerClosed {
		t.Errorf("BreakerStates after the failover = %v: want %s (promoted) closed and %s (former master) gone", states, promoted, former)
	}
	if s := o.BreakerState(); s != BreakerClosed {
		t.Errorf("BreakerState after the failover = %v, want closed", s)
	}
	if got := rec.masterStates()[former]; len(got) == 0 || got[len(got)-1][1] != BreakerClosed {
		t.Errorf("the former master's breaker changes %v, want them to end closed (dropped)", got)
	}
	if got := rec.states(); len(got) == 0 || got[len(got)-1][1] != BreakerClosed {
		t.Errorf("origin breaker changes %v, want them to end closed", got)
	}
}
