package client

import (
	"context"
	"testing"
	"time"
)

func TestBackoffGrowsWithJitterAndIsCapped(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 10, BaseDelay: 50 * time.Millisecond, MaxDelay: time.Second}
	tests := []struct {
		name    string
		attempt int
		full    time.Duration // the backoff before jitter
	}{
		{"after the first attempt", 1, 50 * time.Millisecond},
		{"after the second", 2, 100 * time.Millisecond},
		{"after the fifth", 5, 800 * time.Millisecond},
		{"capped", 6, time.Second},
		{"capped, no overflow", 80, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := map[time.Duration]bool{}
			for range 200 {
				d := p.backoff(tt.attempt)
				if d < tt.full/2 || d > tt.full {
					t.Fatalf("backoff %v, want within [%v, %v]", d, tt.full/2, tt.full)
				}
				seen[d] = true
			}
			if len(seen) < 10 {
				t.Errorf("%d distinct backoffs in 200, want jitter", len(seen))
			}
		})
	}
}

func TestWaitGivesUpBeforeTheDeadline(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 3, BaseDelay: time.Second, MaxDelay: time.Second}
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want bool
	}{
		{"deadline before the backoff ends", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}, false},
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			if got := p.wait(ctx, 1); got != tt.want {
				t.Errorf("wait = %v, want %v", got, tt.want)
			}
			if took := time.Since(start); took > 50*time.Millisecond {
				t.Errorf("wait took %v, want at once", took)
			}
		})
	}
	short := RetryPolicy{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond}
	if !short.wait(context.Background(), 1) {
		t.Error("wait without a deadline = false, want true")
	}
}
