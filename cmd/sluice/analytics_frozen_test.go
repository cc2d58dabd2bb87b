package main

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/analytics"
	analyticsredis "github.com/sluicehq/sluice/analytics/redis"
)

// frozenRedis returns a client of a Redis that takes connections and
// never reads or answers: every call waits for its deadline. Its
// connections are pipes, so that it runs in a synctest bubble.
func frozenRedis() *goredis.Client {
	return goredis.NewClient(&goredis.Options{
		Addr: "frozen:6379",
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			c, _ := net.Pipe()
			return c, nil
		},
	})
}

// TestAnalyticsWithRedisFrozen runs the analytics' goroutines with the
// region's Redis frozen (each Publish waits its whole timeout) and
// records 50,000 decisions a second, 5,000 between two applications of
// the queue: the queue is still applied every advanceInterval, so no
// decision finds it full, and every one is counted.
func TestAnalyticsWithRedisFrozen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := frozenRedis()
		defer client.Close()
		rec, err := analytics.New(analytics.Config{})
		if err != nil {
			t.Fatal(err)
		}
		region, err := analyticsredis.New(analyticsredis.Config{Client: client, Recorder: rec})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { runAnalytics(ctx, rec, region, slog.New(slog.DiscardHandler)) })
		const steps, perStep = 50, 5_000 // 5 s
		time.Sleep(advanceInterval / 2)  // record between the ticks
		for range steps {
			for range perStep {
				rec.Record("ws", "api", "id", true, time.Now())
			}
			time.Sleep(advanceInterval)
		}
		cancel()
		wg.Wait()
		if st := rec.Stats(); st.Dropped != 0 {
			t.Errorf("%d decisions found the queue full", st.Dropped)
		}
		rep, err := rec.Report("ws", "api", analytics.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Requests != steps*perStep {
			t.Errorf("%d decisions counted, want %d", rep.Requests, steps*perStep)
		}
	})
}
