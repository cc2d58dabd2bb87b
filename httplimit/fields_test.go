package httplimit_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

var at = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func TestFields(t *testing.T) {
	tests := []struct {
		name                      string
		res                       httplimit.Result
		wantPolicy, wantRateLimit string
		wantRetryAfter            string // "" for an allowed request
	}{
		{"allowed", httplimit.Result{
			Policy:   httplimit.Policy{Name: "default", Limit: 100, Window: time.Minute},
			Decision: httplimit.Decision{Allowed: true, Limit: 100, Remaining: 42, Reset: at.Add(16200 * time.Millisecond)},
			Cost:     1, At: at,
		}, `"default";q=100;w=60`, `"default";r=42;t=17`, ""},
		{"denied, limit spent", httplimit.Result{
			Policy:   httplimit.Policy{Name: "default", Limit: 3, Window: time.Minute},
			Decision: httplimit.Decision{Limit: 3, Remaining: 0, Reset: at.Add(30 * time.Second)},
			Cost:     1, At: at,
			// 3 units weigh floor(3(60-e)/60) at e s into the next window:
			// 2 from e = 1 ms, when 1 more fits.
		}, `"default";q=3;w=60`, `"default";r=0;t=30`, "31"},
		{"denied, cost over what remains", httplimit.Result{
			Policy:   httplimit.Policy{Name: "api", Limit: 10, Window: time.Minute},
			Decision: httplimit.Decision{Limit: 10, Remaining: 6, Reset: at.Add(10 * time.Second)},
			Cost:     7, At: at,
			// 4 used: floor(4(60-e)/60)+7 <= 10 from e = 1 ms.
		}, `"api";q=10;w=60`, `"api";r=6;t=10`, "11"},
		{"denied, a heavy cost", httplimit.Result{
			Policy:   httplimit.Policy{Name: "api", Limit: 100, Window: time.Minute},
			Decision: httplimit.Decision{Limit: 100, Remaining: 0, Reset: at.Add(60 * time.Second)},
			Cost:     30, At: at,
			// floor(100(60-e)/60)+30 <= 100 from e = 17.401 s.
		}, `"api";q=100;w=60`, `"api";r=0;t=60`, "78"},
		{"denied, cost over the limit: a whole window", httplimit.Result{
			Policy:   httplimit.Policy{Name: "api", Limit: 5, Window: time.Minute},
			Decision: httplimit.Decision{Limit: 5, Remaining: 5, Reset: at.Add(10 * time.Second)},
			Cost:     6, At: at,
		}, `"api";q=5;w=60`, `"api";r=5;t=10`, "70"},
		{"limit 0", httplimit.Result{
			Policy:   httplimit.Policy{Name: "off", Limit: 0, Window: time.Second},
			Decision: httplimit.Decision{Limit: 0, Remaining: 0, Reset: at.Add(200 * time.Millisecond)},
			Cost:     1, At: at,
		}, `"off";q=0;w=1`, `"off";r=0;t=1`, "2"},
		{"sub-second parts round up, at least 1 s", httplimit.Result{
			Policy:   httplimit.Policy{Name: "burst", Limit: 1, Window: 1500 * time.Millisecond},
			Decision: httplimit.Decision{Limit: 1, Remaining: 0, Reset: at.Add(time.Millisecond)},
			Cost:     1, At: at,
		}, `"burst";q=1;w=2`, `"burst";r=0;t=1`, "1"},
		{"reset past: t is 0", httplimit.Result{
			Policy:   httplimit.Policy{Name: "default", Limit: 1, Window: time.Minute},
			Decision: httplimit.Decision{Allowed: true, Limit: 1, Remaining: 1, Reset: at.Add(-time.Second)},
			At:       at,
		}, `"default";q=1;w=60`, `"default";r=1;t=0`, ""},
		{"quotes and backslashes escaped; integers clamped", httplimit.Result{
			Policy:   httplimit.Policy{Name: `a"b\c`, Limit: 1 << 62, Window: time.Hour},
			Decision: httplimit.Decision{Allowed: true, Limit: 1 << 62, Remaining: 1 << 62, Reset: at.Add(time.Hour)},
			At:       at,
		}, `"a\"b\\c";q=999999999999999;w=3600`, `"a\"b\\c";r=999999999999999;t=3600`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			tt.res.SetHeaders(h)
			if got := h.Get("RateLimit-Policy"); got != tt.wantPolicy {
				t.Errorf("RateLimit-Policy %q, want %q", got, tt.wantPolicy)
			}
			if got := h.Get("RateLimit"); got != tt.wantRateLimit {
				t.Errorf("RateLimit %q, want %q", got, tt.wantRateLimit)
			}
			if got := h.Get("Retry-After"); got != tt.wantRetryAfter {
				t.Errorf("Retry-After %q, want %q", got, tt.wantRetryAfter)
			}
		})
	}
}

// manualClock is a clock tests move by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// TestRetryAfterAgainstTheLimiter checks Retry-After with the real sliding
// window: a denied request passes once Retry-After has passed, and not a
// second earlier, when the key's usage is all in the current cell.
func TestRetryAfterAgainstTheLimiter(t *testing.T) {
	tests := []struct {
		name       string
		limit      int64
		spent      int64 // in the current cell, before the denial
		cost       int64
		elapsed    time.Duration // into the cell, at the denial
		window     time.Duration
		wantWaitAt time.Duration // Retry-After, from the denial
	}{
		{"limit spent", 3, 3, 1, 30 * time.Second, time.Minute, 31 * time.Second},
		{"large limit", 100, 100, 1, 43 * time.Second, time.Minute, 18 * time.Second},
		{"cost over what remains", 10, 4, 7, 50 * time.Second, time.Minute, 11 * time.Second},
		{"heavy cost", 10, 10, 5, 0, 10 * time.Second, 15 * time.Second},
		{"heavy cost, longer window", 100, 100, 30, 0, time.Minute, 78 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &manualClock{}
			l, err := sluice.New(sluice.Config{Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			lim := httplimit.Embedded(l)
			cell := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a multiple of every window
			decide := func(at time.Time, cost int64) httplimit.Decision {
				clock.Set(at)
				d, err := lim.Limit(context.Background(), httplimit.Request{Namespace: "n", Identifier: "k", Limit: tt.limit, Window: tt.window, Cost: cost})
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			if tt.spent > 0 && !decide(cell, tt.spent).Allowed {
				t.Fatal("could not spend")
			}
			denialAt := cell.Add(tt.elapsed)
			d := decide(denialAt, tt.cost)
			if d.Allowed {
				t.Fatal("not denied")
			}
			wait := httplimit.Result{Policy: httplimit.Policy{Name: "n", Limit: tt.limit, Window: tt.window}, Decision: d, Cost: tt.cost, At: denialAt}.RetryAfter()
			if wait != tt.wantWaitAt {
				t.Errorf("Retry-After %v, want %v", wait, tt.wantWaitAt)
			}
			if decide(denialAt.Add(wait-time.Second), 0).Remaining >= tt.cost {
				t.Errorf("a second before Retry-After, the cost fits already: Retry-After is not tight")
			}
			if !decide(denialAt.Add(wait), tt.cost).Allowed {
				t.Errorf("denied again after Retry-After (%v)", wait)
			}
		})
	}
}

// refusedAddr is a loopback address where nothing listens.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
