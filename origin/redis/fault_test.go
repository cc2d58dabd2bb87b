package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
)

// Fault injection: an in-process toxiproxy between the client and the real
// Redis. Every wait is a poll with a deadline; no test asserts a speed.

// faultOrigin builds an Origin whose client goes through p and counts the
// commands it sends.
func faultOrigin(t *testing.T, p *testenv.Proxy, cfg Config) (*Origin, *recorder, *cmdCounter) {
	t.Helper()
	client := newTestClient(t, p.Addr())
	cmds := &cmdCounter{}
	client.AddHook(cmds)
	rec := &recorder{}
	cfg.Client, cfg.Observer = client, rec
	return newOrigin(t, cfg), rec, cmds
}

func testDelta(t *testing.T, ws string) []origin.Delta {
	return []origin.Delta{add(origin.Cell{Key: origin.Key{Workspace: ws, Namespace: "fault", Identifier: "i", Duration: time.Minute}, Sequence: 1}, 1)}
}

// waitRecovered polls Apply until it succeeds (the breaker half-opened, the
// probe passed and it closed again).
func waitRecovered(t *testing.T, o *Origin, deltas []origin.Delta, within time.Duration) {
	t.Helper()
	eventually(t, within, "the origin to recover", func() bool {
		_, err := o.Apply(context.Background(), deltas)
		return err == nil
	})
	if s := o.BreakerState(); s != BreakerClosed {
		t.Fatalf("breaker %v after a successful call, want closed", s)
	}
}

func TestFaultLatencyTimesOutAndOpensBreaker(t *testing.T) {
	t.Parallel()
	p := testenv.NewProxy(t, realRedisAddr(t))
	o, rec, cmds := faultOrigin(t, p, Config{
		Timeout: 100 * time.Millisecond,
		Breaker: BreakerConfig{ConsecutiveFailures: 5, OpenTimeout: 300 * time.Millisecond},
	})
	ws := workspace(t)
	deltas := testDelta(t, ws)
	if _, err := o.Apply(context.Background(), deltas); err != nil {
		t.Fatalf("Apply before the fault: %v", err)
	}

	endSlow := p.Latency(500 * time.Millisecond)
	for i := range 5 {
		_, err := o.Apply(context.Background(), deltas)
		if !errors.Is(err, origin.ErrUnavailable) || !strings.HasPrefix(err.Error(), "redis: apply: ") {
			t.Fatalf("call %d with 500ms latency and 100ms timeout: %v, want a redis: error wrapping ErrUnavailable", i, err)
		}
	}
	if got := rec.outcomes()[OutcomeTimeout]; got != 5 {
		t.Fatalf("outcomes %v, want 5 timeouts", rec.outcomes())
	}
	if s := o.BreakerState(); s != BreakerOpen {
		t.Fatalf("breaker %v after 5 consecutive timeouts, want open", s)
	}
	if got := o.BreakerStates(); len(got) != 0 {
		t.Fatalf("BreakerStates = %v on a client of one server, want none (its one breaker is BreakerState)", got)
	}
	if to, all := rec.callsTo(""); to != all {
		t.Fatalf("%d of %d observed calls name a master on a client of one server", all-to, all)
	}

	// Open: fail fast, no command reaches the client.
	before := cmds.n.Load()
	for range 50 {
		if _, err := o.Load(context.Background(), deltas[0].Cell.Key, 1); !errors.Is(err, origin.ErrUnavailable) {
			t.Fatalf("Load with an open breaker: %v", err)
		}
		if o.BreakerState() != BreakerOpen {
			break // OpenTimeout passed on a slow machine: stop counting
		}
	}
	if sent := cmds.n.Load() - before; sent > 1 { // at most one half-open probe
		t.Fatalf("%d commands sent while the breaker was open", sent)
	}
	if rec.outcomes()[OutcomeRejected] == 0 {
		t.Fatalf("no rejected calls observed: %v", rec.outcomes())
	}

	endSlow()
	waitRecovered(t, o, deltas, 10*time.Second)
	st := rec.states()
	if len(st) < 3 || st[0] != [2]BreakerState{BreakerClosed, BreakerOpen} || st[len(st)-1] != [2]BreakerState{BreakerHalfOpen, BreakerClosed} {
		t.Fatalf("breaker transitions %v, want closed→open … half-open→closed", st)
	}
}

func TestFaultRedisDownAndBack(t *testing.T) {
	t.Parallel()
	p := testenv.NewProxy(t, realRedisAddr(t))
	// Default breaker settings: the probe comes within DefaultOpenTimeout.
	o, rec, _ := faultOrigin(t, p, Config{})
	ws := workspace(t)
	deltas := testDelta(t, ws)
	if _, err := o.Apply(context.Background(), deltas); err != nil {
		t.Fatalf("Apply before the fault: %v", err)
	}

	p.Down() // Redis "down": connections closed, new ones refused
	failures := 0
	for o.BreakerState() == BreakerClosed {
		if _, err := o.Load(context.Background(), deltas[0].Cell.Key, 1); !errors.Is(err, origin.ErrUnavailable) {
			t.Fatalf("Load with Redis down: %v", err)
		}
		if failures++; failures > 20 {
			t.Fatalf("breaker still closed after %d failures (outcomes %v)", failures, rec.outcomes())
		}
	}
	if failures < DefaultConsecutiveFailures {
		t.Fatalf("breaker opened after %d failures, want ≥ %d", failures, DefaultConsecutiveFailures)
	}
	// Refused dials are retried by go-redis until the call's deadline, so a
	// failure is reported as unavailable or as a timeout.
	if out := rec.outcomes(); out[OutcomeUnavailable]+out[OutcomeTimeout] < DefaultConsecutiveFailures {
		t.Fatalf("outcomes %v, want ≥ %d failures", out, DefaultConsecutiveFailures)
	}
	if _, err := o.Apply(context.Background(), deltas); !errors.Is(err, origin.ErrUnavailable) || !strings.Contains(err.Error(), "circuit breaker is open") {
		t.Fatalf("Apply with open breaker: %v", err)
	}

	p.Up() // same address
	waitRecovered(t, o, deltas, 10*time.Second)
	c, err := o.Load(context.Background(), deltas[0].Cell.Key, 1)
	if err != nil || c.Current != 1 {
		t.Fatalf("Load after recovery = %+v, %v; want current 1 (the same write, sent again, counts once)", c, err)
	}
}

func TestFaultConnectionReset(t *testing.T) {
	t.Parallel()
	p := testenv.NewProxy(t, realRedisAddr(t))
	o, rec, _ := faultOrigin(t, p, Config{Breaker: BreakerConfig{ConsecutiveFailures: 3, OpenTimeout: 200 * time.Millisecond}})
	ws := workspace(t)
	deltas := testDelta(t, ws)
	if _, err := o.Apply(context.Background(), deltas); err != nil {
		t.Fatalf("Apply before the fault: %v", err)
	}
	endReset := p.ResetPeer()
	for i := range 3 {
		_, err := o.Apply(context.Background(), deltas)
		if !errors.Is(err, origin.ErrUnavailable) {
			t.Fatalf("call %d through reset_peer: %v, want ErrUnavailable", i, err)
		}
	}
	out := rec.outcomes()
	if out[OutcomeUnavailable]+out[OutcomeTimeout] != 3 {
		t.Fatalf("outcomes %v, want 3 failures", out)
	}
	if s := o.BreakerState(); s != BreakerOpen {
		t.Fatalf("breaker %v, want open", s)
	}
	endReset()
	waitRecovered(t, o, deltas, 10*time.Second)
}

// TestFaultCallerCancelIsNotAFailure cancels calls stuck behind latency: the
// breaker must not count them.
func TestFaultCallerCancelIsNotAFailure(t *testing.T) {
	t.Parallel()
	p := testenv.NewProxy(t, realRedisAddr(t))
	o, rec, _ := faultOrigin(t, p, Config{Breaker: BreakerConfig{ConsecutiveFailures: 2}})
	deltas := testDelta(t, workspace(t))
	defer p.Latency(300 * time.Millisecond)()
	for i := range 6 {
		parent, cancel := context.WithCancel(context.Background())
		ctx, cancelTimeout := context.WithTimeout(parent, 150*time.Millisecond)
		timer := time.AfterFunc(20*time.Millisecond, cancel)
		_, err := o.Apply(ctx, deltas)
		timer.Stop()
		cancel()
		cancelTimeout()
		if err == nil || errors.Is(err, origin.ErrUnavailable) || !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "cancel") {
			t.Fatalf("call %d canceled by its caller: %v", i, err)
		}
	}
	if s := o.BreakerState(); s != BreakerClosed {
		t.Fatalf("breaker %v after caller cancellations, want closed (outcomes %v)", s, rec.outcomes())
	}
	if got := rec.outcomes()[OutcomeCanceled]; got != 6 {
		t.Fatalf("outcomes %v, want 6 canceled", rec.outcomes())
	}
	// An already-canceled context never reaches the breaker.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := o.Load(ctx, deltas[0].Cell.Key, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Load with a canceled context: %v", err)
	}
}
