package sluice_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
)

// TestCallerThatGivesUpInQueueCountsOnce holds an origin decision (request
// A) while a second request on the same cell (B) queues behind it; B's
// caller gives up before B's batch is sent, and B is admitted locally.
// Then the origin answers: A's decision, and the next batch, which still
// holds B's ask while it carries B's local admission in the writer's count.
// The origin must count B once (virtual time).
//
// It fails on the limiter as it is (the origin counts 8 for 7 admitted
// units): decideBatch sends the asks of tickets abandoned before it read
// the writer's count. Found by e2e TestChaos (its near-limit namespace).
func TestCallerThatGivesUpInQueueCountsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaultyOrigin()
		l, err := sluice.New(sluice.Config{Origin: f, OriginMargin: 0.5, RefreshAfter: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 10, Duration: time.Hour, Cost: 1, Time: time.Now()}
		admitted := spend(t, l, r, 5) // local: the next units are within the margin
		f.holdDecide.Store(true)
		results := make(chan sluice.Response, 2)
		decide := func(ctx context.Context) {
			res, err := l.Ratelimit(ctx, r)
			if err != nil {
				t.Error(err)
			}
			results <- res
		}
		go decide(context.Background()) // A: its decision is held at the origin
		synctest.Wait()
		ctx, giveUp := context.WithCancel(context.Background())
		go decide(ctx) // B: queued behind A's decision
		synctest.Wait()
		giveUp() // B's caller stops waiting: B is decided locally
		if res := <-results; !res.Success {
			t.Fatalf("the caller that gave up: %+v; want a local admission", res)
		}
		close(f.release) // A's decision runs, then the batch that still asks for B
		if res := <-results; !res.Success {
			t.Fatalf("request A: %+v; want an admission", res)
		}
		admitted += 2
		synctest.Wait()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if got := f.total(t, r); got != admitted {
			t.Fatalf("the origin counts %d for %d admitted units", got, admitted)
		}
	})
}
