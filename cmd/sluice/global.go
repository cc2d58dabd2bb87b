package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/global/mysql"
)

// GlobalFlags are the flags of the global layer, embedded in serveCmd.
type GlobalFlags struct {
	GlobalInterval    time.Duration `name:"global-interval" default:"5s" help:"Pace of the global layer (publish, pull, denial sync), ±20% jitter. Needs --mysql-dsn."`
	GlobalCounters    bool          `name:"global-counters" default:"true" help:"Share per-region counts through MySQL (G-Counter). --global-counters=false turns it off."`
	DenialPropagation bool          `name:"denial-propagation" default:"true" help:"Propagate denials to every region through MySQL. --denial-propagation=false turns it off."`
	DenialMinWindow   time.Duration `name:"denial-min-window" default:"1m" help:"Shortest window whose denials are propagated."`
	DenialMinUsage    float64       `name:"denial-min-usage" default:"0.5" help:"Share of the limit used before a denied request for the denial to be propagated, (0, 1]."`
}

// validate checks the global flags.
func (g *GlobalFlags) validate() error {
	switch {
	case g.GlobalInterval <= 0:
		return errors.New("--global-interval must be positive")
	case g.DenialMinWindow < 0:
		return errors.New("--denial-min-window must not be negative")
	case !(g.DenialMinUsage > 0 && g.DenialMinUsage <= 1):
		return fmt.Errorf("--denial-min-usage %v: want a number in (0, 1]", g.DenialMinUsage)
	}
	return nil
}

// newGlobal opens the global store on --mysql-dsn and sets the limiter's
// global fields; without --mysql-dsn, or with both mechanisms off, it does
// nothing. The store closes after the limiter (cleanups run in reverse).
func (c *serveCmd) newGlobal(ctx context.Context, cfg *sluice.Config, log *slog.Logger, reg prometheus.Registerer, cl *cleanup) error {
	if c.MySQLDSN == "" || (!c.GlobalCounters && !c.DenialPropagation) {
		return nil
	}
	m := newGlobalMetrics(reg)
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := mysql.Open(openCtx, c.MySQLDSN, mysql.Config{Logger: log, Observer: m})
	if err != nil {
		return fmt.Errorf("--mysql-dsn (global layer): %w", err)
	}
	cl.add(func() { _ = s.Close() })
	cfg.Global = s
	cfg.GlobalInterval = c.GlobalInterval
	cfg.GlobalObserver = m
	cfg.DisableGlobalCounters = !c.GlobalCounters
	cfg.DisableDenialPropagation = !c.DenialPropagation
	cfg.DenialMinWindow = max(c.DenialMinWindow, time.Millisecond)
	cfg.DenialMinUsage = c.DenialMinUsage
	log.Info("global layer on", "store", "mysql", "interval", c.GlobalInterval,
		"counters", c.GlobalCounters, "denial_propagation", c.DenialPropagation)
	return nil
}

// globalMetrics exports the global layer as sluice_global_* metrics: the
// limiter's rounds and the MySQL store's calls and breaker.
type globalMetrics struct {
	rows    *prometheus.CounterVec
	rounds  *prometheus.CounterVec
	lag     prometheus.Histogram
	regions prometheus.Gauge
	calls   *prometheus.CounterVec
	breaker prometheus.Gauge
}

var (
	_ sluice.GlobalObserver = (*globalMetrics)(nil)
	_ mysql.Observer        = (*globalMetrics)(nil)
)

func newGlobalMetrics(reg prometheus.Registerer) *globalMetrics {
	m := &globalMetrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_global_rows_total",
			Help: "Rows of the global layer by kind: published, pulled, denials_sent, denials_applied, denials_dropped, cleaned.",
		}, []string{"kind"}),
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_global_rounds_total",
			Help: "Rounds of the global layer (publish, pull, denial sync) by outcome: ok or error.",
		}, []string{"outcome"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_global_round_seconds",
			Help:    "Duration of a global round; with the interval, it bounds how stale imported counts are.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		regions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_global_regions",
			Help: "Regions present at the last pull.",
		}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_global_store_calls_total",
			Help: "Calls of the MySQL global store by operation and outcome (ok, error, timeout, unavailable, rejected, canceled).",
		}, []string{"op", "outcome"}),
		breaker: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_global_breaker_state",
			Help: "Circuit breaker of the MySQL global store: 0 closed, 1 half-open, 2 open.",
		}),
	}
	reg.MustRegister(m.rows, m.rounds, m.lag, m.regions, m.calls, m.breaker)
	return m
}

// GlobalRound implements [sluice.GlobalObserver].
func (m *globalMetrics) GlobalRound(st sluice.GlobalStats) {
	for kind, n := range map[string]int{
		"published": st.Published, "pulled": st.Pulled, "denials_sent": st.DenialsSent,
		"denials_applied": st.DenialsSynced, "denials_dropped": st.DenialsLost, "cleaned": st.Cleaned,
	} {
		if n > 0 {
			m.rows.WithLabelValues(kind).Add(float64(n))
		}
	}
	if st.Regions > 0 {
		m.regions.Set(float64(st.Regions))
		m.lag.Observe(st.Elapsed.Seconds())
	}
	outcome := "ok"
	if st.Err != nil {
		outcome = "error"
	}
	m.rounds.WithLabelValues(outcome).Inc()
}

// ObserveCall implements [mysql.Observer].
func (m *globalMetrics) ObserveCall(c mysql.Call) {
	m.calls.WithLabelValues(string(c.Op), string(c.Outcome)).Inc()
}

// BreakerChanged implements [mysql.Observer].
func (m *globalMetrics) BreakerChanged(_, to mysql.BreakerState) {
	m.breaker.Set(float64(to))
}
