package breaker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// outcome is a package's own Outcome type, as Run sees it.
type outcome string

var errCall = errors.New("call failed")

func TestStateString(t *testing.T) {
	tests := []struct {
		s     State
		want  string
		level slog.Level
	}{
		{Closed, "closed", slog.LevelInfo},
		{HalfOpen, "half-open", slog.LevelInfo},
		{Open, "open", slog.LevelWarn},
		{State(7), "unknown", slog.LevelInfo},
	}
	for _, tc := range tests {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("State(%d).String() = %q, want %q", int(tc.s), got, tc.want)
		}
		if got := tc.s.LogLevel(); got != tc.level {
			t.Errorf("%s.LogLevel() = %v, want %v", tc.s, got, tc.level)
		}
	}
}

func TestStateOf(t *testing.T) {
	tests := []struct {
		in   gobreaker.State
		want State
	}{
		{gobreaker.StateClosed, Closed},
		{gobreaker.StateHalfOpen, HalfOpen},
		{gobreaker.StateOpen, Open},
		{gobreaker.State(9), Closed},
	}
	for _, tc := range tests {
		if got := StateOf(tc.in); got != tc.want {
			t.Errorf("StateOf(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestRun sends the same failing call through a fresh breaker of three
// consecutive failures, calls times, then one more call.
func TestRun(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name     string
		ctx      context.Context
		fn       func(context.Context) error
		classify outcome
		calls    int
		want     outcome // outcome of each of the calls
		next     outcome // outcome of the call after them
		state    State   // after the next call
	}{
		{"ok", context.Background(), func(context.Context) error { return nil }, "", 5, "ok", "ok", Closed},
		{"unavailable opens after 3", context.Background(), fail, "unavailable", 3, "unavailable", "rejected", Open},
		{"the third failure opens", context.Background(), fail, "unavailable", 2, "unavailable", "unavailable", Open},
		{"errors count as successes", context.Background(), fail, "error", 5, "error", "error", Closed},
		{"canceled calls are not counted", canceled, fail, "unavailable", 5, "canceled", "canceled", Closed},
		{"default deadline times out", context.Background(), wait, "unavailable", 3, "timeout", "rejected", Open},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var changes []State
			cb := New(Settings{
				Name: tc.name, ConsecutiveFailures: 3, HalfOpenProbes: 1, OpenTimeout: time.Minute,
				OnChange: func(_, to State) { changes = append(changes, to) },
			})
			classify := func(error) outcome { return tc.classify }
			for i := range tc.calls {
				out, err := Run(tc.ctx, cb, 10*time.Millisecond, tc.fn, classify)
				if out != tc.want {
					t.Fatalf("call %d: outcome %q, want %q (err %v)", i, out, tc.want, err)
				}
				if out != "ok" && out != "timeout" && !errors.Is(err, errCall) {
					t.Fatalf("call %d: error %v, want the call's own", i, err)
				}
			}
			out, err := Run(tc.ctx, cb, 10*time.Millisecond, tc.fn, classify)
			if out != tc.next {
				t.Fatalf("next call: outcome %q, want %q (err %v)", out, tc.next, err)
			}
			if out == "rejected" && !errors.Is(err, gobreaker.ErrOpenState) {
				t.Errorf("rejected call: error %v, want gobreaker.ErrOpenState", err)
			}
			if got := StateOf(cb.State()); got != tc.state {
				t.Errorf("state %v, want %v", got, tc.state)
			}
			if want := tc.state == Open; want != (len(changes) == 1 && changes[0] == Open) {
				t.Errorf("OnChange saw %v, want a change to open: %v", changes, want)
			}
		})
	}
}

func fail(context.Context) error { return errCall }

// wait blocks until its context is done: only a deadline ends it.
func wait(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestReadyToTripAndOutcome(t *testing.T) {
	// A custom trip rule and classifier replace the defaults.
	cb := New(Settings{
		Name:           "custom",
		ReadyToTrip:    func(c gobreaker.Counts) bool { return c.TotalFailures >= 1 },
		Outcome:        func(err error) Outcome { return Outcome(err.Error()) },
		HalfOpenProbes: 1,
		OpenTimeout:    time.Minute,
	})
	for _, o := range []Outcome{Canceled, Error, OK} {
		_, _ = cb.Execute(func() (struct{}, error) { return struct{}{}, errors.New(string(o)) })
	}
	if s := StateOf(cb.State()); s != Closed {
		t.Fatalf("after canceled, error and ok: %v, want closed", s)
	}
	_, _ = cb.Execute(func() (struct{}, error) { return struct{}{}, errors.New(string(Timeout)) })
	if s := StateOf(cb.State()); s != Open {
		t.Fatalf("after one timeout: %v, want open", s)
	}
}
