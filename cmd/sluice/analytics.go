package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/analytics"
)

// AnalyticsFlags are the flags of the decision analytics, embedded in
// serveCmd.
type AnalyticsFlags struct {
	Analytics              bool `name:"analytics" default:"true" negatable:"" help:"Record every decision for ratelimit.getAnalytics and the console on the admin listener: passed and denied per second for an hour and per minute for a day, and the top identifiers, per namespace, in bounded memory. --analytics=false turns it off."`
	AnalyticsMaxNamespaces int  `name:"analytics-max-namespaces" default:"256" help:"Most namespaces (of all workspaces) whose analytics are kept one by one, each in about 132 KB plus the identifiers of its top lists; decisions of further namespaces are counted together."`
}

// validate checks the analytics flags.
func (f *AnalyticsFlags) validate() error {
	if f.AnalyticsMaxNamespaces < 1 {
		return errors.New("--analytics-max-namespaces must be at least 1")
	}
	return nil
}

// advanceInterval is how often the queued decisions are applied to the
// analytics: the lag of a console or getAnalytics answer is shorter, since
// a read applies the queue first.
const advanceInterval = 100 * time.Millisecond

// newAnalytics returns the analytics recorder, or nil with --analytics=false,
// and applies its queue every advanceInterval until cleanup.
func (c *serveCmd) newAnalytics(log *slog.Logger, cl *cleanup) (*analytics.Recorder, error) {
	if !c.Analytics {
		log.Info("analytics off (--analytics=false): getAnalytics answers 404 and the console shows no charts")
		return nil, nil
	}
	rec, err := analytics.New(analytics.Config{MaxNamespaces: c.AnalyticsMaxNamespaces})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(advanceInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				rec.Advance(now)
			}
		}
	})
	cl.add(func() { cancel(); wg.Wait() })
	return rec, nil
}
