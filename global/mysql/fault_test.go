package mysql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/internal/testenv"
)

// Fault injection: an in-process toxiproxy between the store and the real
// MariaDB. Waits are polls with deadlines; bounds on elapsed time are loose
// (a call must end near its deadline, not after the fault is gone).

// faultStore opens a store whose connections go through a proxy, on tables
// migrated directly (so the proxy only carries the calls under test).
func faultStore(t *testing.T, cfg Config) (*Store, *testenv.Proxy, *recorder) {
	t.Helper()
	direct := testenv.MySQLDSN(t)
	dc, err := mysqldriver.ParseDSN(direct)
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewProxy(t, dc.Addr)
	dc.Addr = p.Addr()
	rec := &recorder{}
	cfg.Observer = rec
	cfg.TablePrefix = newPrefix(t)
	return openStore(t, cfg, dc.FormatDSN()), p, rec
}

// faultCalls are the store's calls, each on a small valid input.
func faultCalls(s *Store) map[Op]func(context.Context) error {
	c := testCell("fault", seq)
	return map[Op]func(context.Context) error{
		OpPublish: func(ctx context.Context) error {
			return s.Publish(ctx, "a", []global.Count{{Cell: c, Count: 1, ExpiresAt: now + 60_000}}, now)
		},
		OpAnnounce: func(ctx context.Context) error { return s.Announce(ctx, "a", now) },
		OpPull:     func(ctx context.Context) error { _, err := s.Pull(ctx, "b", 0, now, 1000); return err },
		OpEmitDenials: func(ctx context.Context) error {
			return s.EmitDenials(ctx, []global.Denial{{Cell: c, Limit: 1, ExpiresAt: now + 60_000}})
		},
		OpDenials: func(ctx context.Context) error { _, _, err := s.Denials(ctx, "b", 0, now); return err },
		OpPullWithDenials: func(ctx context.Context) error {
			_, _, _, err := s.PullWithDenials(ctx, "b", 0, 0, now, 1000)
			return err
		},
		OpCleanup: func(ctx context.Context) error { _, err := s.Cleanup(ctx, 0, 10); return err },
	}
}

// waitRecovered polls every call until each succeeds once, then checks
// that the breaker is closed.
func waitRecovered(t *testing.T, s *Store, within time.Duration) {
	t.Helper()
	for op, call := range faultCalls(s) {
		eventually(t, within, "recovery of "+string(op), func() bool { return call(ctx) == nil })
	}
	if st := s.BreakerState(); st != BreakerClosed {
		t.Fatalf("breaker %v after recovery, want closed", st)
	}
}

// TestFaults: with MariaDB down, slow (1s latency) or resetting
// connections, every call fails with a global/mysql error within its
// deadline; once the breaker opens, calls fail at once wrapping
// global.ErrUnavailable; when the fault ends, every call works again.
func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(p *testenv.Proxy) (end func())
	}{
		{"down", func(p *testenv.Proxy) func() { p.Down(); return p.Up }},
		{"slow", func(p *testenv.Proxy) func() { return p.Latency(time.Second) }},
		{"reset", func(p *testenv.Proxy) func() { return p.ResetPeer() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const timeout = 200 * time.Millisecond
			s, p, rec := faultStore(t, Config{
				Timeout: timeout,
				Breaker: BreakerConfig{ConsecutiveFailures: 3, OpenTimeout: 300 * time.Millisecond},
			})
			waitRecovered(t, s, 5*time.Second)
			end := tc.inject(p)
			failFast(t, s, timeout)
			end()
			waitRecovered(t, s, 10*time.Second)
			for _, want := range []string{"closed->open", "open->half-open", "half-open->closed"} {
				if !strings.Contains(rec.states(), want) {
					t.Fatalf("breaker transitions %q, want %s among them", rec.states(), want)
				}
			}
		})
	}
}

// failFast checks that every call fails within timeout (plus slack) until
// the breaker opens, and that an open breaker rejects calls without the
// network.
func failFast(t *testing.T, s *Store, timeout time.Duration) {
	t.Helper()
	const slack = 500 * time.Millisecond
	for op, call := range faultCalls(s) {
		start := time.Now()
		err := call(ctx)
		if d := time.Since(start); d > timeout+slack {
			t.Fatalf("%s took %v under the fault, deadline %v", op, d, timeout)
		}
		if err == nil || !strings.HasPrefix(err.Error(), "global/mysql: "+string(op)+": ") {
			t.Fatalf("%s under the fault: %v, want a global/mysql: %s: error", op, err, op)
		}
	}
	if st := s.BreakerState(); st != BreakerOpen {
		t.Fatalf("breaker %v after six failed calls, want open", st)
	}
	start := time.Now()
	err := faultCalls(s)[OpPull](ctx)
	if !errors.Is(err, global.ErrUnavailable) || !strings.Contains(err.Error(), "circuit breaker is open") {
		t.Fatalf("Pull with an open breaker: %v", err)
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Fatalf("a rejected call took %v", d)
	}
}

// TestCallerDeadline: a caller's deadline shorter than Config.Timeout ends
// a call stuck behind 1s of latency, and the failure wraps
// global.ErrUnavailable (a timeout counts against the breaker).
func TestCallerDeadline(t *testing.T) {
	s, p, rec := faultStore(t, Config{Timeout: 10 * time.Second})
	defer p.Latency(time.Second)()
	for op, call := range faultCalls(s) {
		cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		start := time.Now()
		err := call(cctx)
		cancel()
		if d := time.Since(start); d > 700*time.Millisecond {
			t.Fatalf("%s took %v with a 150ms deadline", op, d)
		}
		if s.BreakerState() == BreakerClosed && !errors.Is(err, global.ErrUnavailable) {
			t.Fatalf("%s past its deadline: %v, want ErrUnavailable", op, err)
		}
	}
	if rec.outcomes()[OutcomeTimeout] == 0 {
		t.Fatalf("outcomes %v, want timeouts", rec.outcomes())
	}
}

// TestCanceledCallDoesNotTrip: a caller canceling calls is not an outage.
func TestCanceledCallDoesNotTrip(t *testing.T) {
	s, p, rec := faultStore(t, Config{Breaker: BreakerConfig{ConsecutiveFailures: 1}})
	defer p.Latency(time.Second)()
	for range 3 {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(50*time.Millisecond, cancel)
		if err := faultCalls(s)[OpPull](cctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled Pull: %v", err)
		}
	}
	if st := s.BreakerState(); st != BreakerClosed {
		t.Fatalf("breaker %v after canceled calls, want closed", st)
	}
	if got := rec.outcomes()[OutcomeCanceled]; got != 3 {
		t.Fatalf("outcomes %v, want 3 canceled", rec.outcomes())
	}
}
