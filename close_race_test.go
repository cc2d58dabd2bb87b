package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin/memory"
)

// TestCloseRacesHydrations closes limiters while requests on cold counters
// hydrate from a slow origin: every request either decides or gets
// ErrClosed, and Close neither panics nor races a read that starts as it
// runs (with -race).
func TestCloseRacesHydrations(t *testing.T) {
	for round := range 30 {
		so := &slowOrigin{Store: memory.New(nil), latency: time.Millisecond}
		l, err := sluice.New(sluice.Config{Origin: so})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 40 {
					r := sluice.Request{Namespace: "n", Identifier: fmt.Sprint(round, g, i), Limit: 10, Duration: time.Minute, Cost: 1}
					if _, err := l.Ratelimit(context.Background(), r); err != nil && !errors.Is(err, sluice.ErrClosed) {
						t.Errorf("request: %v", err)
					}
				}
			})
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		if err := l.Close(); err != nil && !errors.Is(err, sluice.ErrNotFlushed) {
			t.Errorf("Close: %v", err)
		}
		wg.Wait()
	}
}
