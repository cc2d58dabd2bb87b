package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/analytics"
	analyticscluster "github.com/sluicehq/sluice/analytics/cluster"
	analyticsredis "github.com/sluicehq/sluice/analytics/redis"
	"github.com/sluicehq/sluice/origin/redis"
	"github.com/sluicehq/sluice/server"
)

// AnalyticsFlags are the flags of the decision analytics, embedded in
// serveCmd.
type AnalyticsFlags struct {
	Analytics              bool `name:"analytics" default:"true" negatable:"" help:"Record every decision for ratelimit.getAnalytics and the console on the admin listener: passed and denied per second for an hour and per minute for a day, and the top identifiers, per namespace, in bounded memory. With --redis-url the nodes sharing it answer for the region (lag: 1s); in cluster mode without it, every member is asked at each answer. --analytics=false turns it off."`
	AnalyticsMaxNamespaces int  `name:"analytics-max-namespaces" default:"256" help:"Most namespaces (of all workspaces) whose analytics are kept one by one, each in about 132 KB plus the identifiers of its top lists; decisions of further namespaces are counted together. 0: the default."`
}

// validate checks the analytics flags.
func (f *AnalyticsFlags) validate() error {
	if f.AnalyticsMaxNamespaces < 0 {
		return errors.New("--analytics-max-namespaces must not be negative")
	}
	return nil
}

// How often the queued decisions are applied to the analytics (a read
// applies the queue first, so answers lag less), and how often a node
// publishes its analytics to the region's Redis (the lag of region-wide
// answers).
const (
	advanceInterval = 100 * time.Millisecond
	publishInterval = time.Second
)

// registerAnalyticsMetrics registers the analytics' metric,
// sluice_analytics_decisions_dropped_total, read from dropped.
func registerAnalyticsMetrics(reg prometheus.Registerer, dropped func() float64) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_analytics_decisions_dropped_total",
		Help: "Decisions left out of the analytics because the recorder's queue was full (decisions are never held back for it).",
	}, dropped))
}

// newAnalytics returns the analytics, or nil with --analytics=false: this
// node's recorder, shared with the nodes of the region through --redis-url
// when it is set. It applies the queue every advanceInterval, and
// publishes every publishInterval, until cleanup. The decisions the
// recorder leaves out (its queue full) are counted in
// sluice_analytics_decisions_dropped_total.
func (c *serveCmd) newAnalytics(log *slog.Logger, reg prometheus.Registerer, cl *cleanup) (server.Analytics, error) {
	if !c.Analytics {
		log.Info("analytics off (--analytics=false): getAnalytics answers 404 and the console shows no charts")
		return nil, nil
	}
	rec, err := analytics.New(analytics.Config{MaxNamespaces: c.AnalyticsMaxNamespaces})
	if err != nil {
		return nil, err
	}
	registerAnalyticsMetrics(reg, func() float64 { return float64(rec.Stats().Dropped) })
	var region *analyticsredis.Region
	if c.RedisURL != "" {
		client, err := redis.NewClient(c.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		cl.add(func() { _ = client.Close() })
		if region, err = analyticsredis.New(analyticsredis.Config{Client: client, Recorder: rec, Logger: log}); err != nil {
			return nil, err
		}
		log.Info("analytics: shared with the nodes on --redis-url; answers cover the region, lagging by up to 1s")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { runAnalytics(ctx, rec, region, log) })
	cl.add(func() { cancel(); wg.Wait() })
	switch {
	case region != nil:
		return region, nil
	case c.origin != nil: // cluster mode without Redis: ask the members
		members, err := analyticscluster.New(analyticscluster.Config{Recorder: rec, Peers: c.origin, Logger: log})
		if err != nil {
			return nil, err
		}
		log.Info("analytics: answers cover the cluster's members, asked through the peer RPC at each answer")
		return members, nil
	}
	return rec, nil
}

// runAnalytics applies rec's queue every advanceInterval and, on a
// goroutine of its own, publishes to region (if any) every
// publishInterval, until ctx ends; it returns once both have stopped. A
// publication waits for Redis up to its timeout, so it never runs on the
// goroutine that applies the queue: a slow or frozen Redis then delays
// the region's view of this node, never the queue, which would fill and
// drop decisions.
func runAnalytics(ctx context.Context, rec *analytics.Recorder, region *analyticsredis.Region, log *slog.Logger) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if region != nil {
		wg.Go(func() { publishAnalytics(ctx, region, log) })
	}
	advance := time.NewTicker(advanceInterval)
	defer advance.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-advance.C:
			rec.Advance(now)
		}
	}
}

// publishAnalytics publishes to region every publishInterval until ctx
// ends. A failed publication is logged once, and its recovery too.
func publishAnalytics(ctx context.Context, region *analyticsredis.Region, log *slog.Logger) {
	publish := time.NewTicker(publishInterval)
	defer publish.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-publish.C:
			err := region.Publish(ctx, now)
			switch {
			case err != nil && !failing:
				log.Warn("analytics: publishing to Redis failed; other nodes' answers miss this node's decisions until it succeeds", "err", err)
			case err == nil && failing:
				log.Info("analytics: publishing to Redis again")
			}
			failing = err != nil
		}
	}
}
