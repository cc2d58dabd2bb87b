package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
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
	MySQLReadDSN      string        `name:"mysql-read-dsn" placeholder:"DSN" help:"MySQL/MariaDB DSN (go-sql-driver format) of a read replica of --mysql-dsn: the global layer reads the other regions' counts and denials there and writes to --mysql-dsn. A lagging replica delays what is read, never loses it. Needs --mysql-dsn."`
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
	if g.MySQLReadDSN != "" {
		if _, err := mysqldriver.ParseDSN(g.MySQLReadDSN); err != nil {
			return fmt.Errorf("--mysql-read-dsn: %w", err) // the error quotes no part of the DSN
		}
	}
	return nil
}

// errReadDSNAlone reports --mysql-read-dsn without --mysql-dsn.
var errReadDSNAlone = errors.New("--mysql-read-dsn needs --mysql-dsn (the primary, where the global layer writes)")

// globalStore returns the configuration of the global store of c.
func (c *serveCmd) globalStore(log *slog.Logger, obs mysql.Observer) mysql.Config {
	return mysql.Config{Logger: log, Observer: obs, ReadDSN: c.MySQLReadDSN}
}

// newGlobal opens the global store on --mysql-dsn (its reads on
// --mysql-read-dsn, if set) and sets the limiter's global fields; without
// --mysql-dsn, or with both mechanisms off, it does nothing, and
// --mysql-read-dsn without --mysql-dsn is an error. The store closes after
// the limiter (cleanups run in reverse).
func (c *serveCmd) newGlobal(ctx context.Context, cfg *sluice.Config, log *slog.Logger, reg prometheus.Registerer, cl *cleanup) error {
	if c.MySQLReadDSN != "" && c.MySQLDSN == "" {
		return errReadDSNAlone
	}
	if c.MySQLDSN == "" || (!c.GlobalCounters && !c.DenialPropagation) {
		return nil
	}
	m := newGlobalMetrics(reg)
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := mysql.Open(openCtx, c.MySQLDSN, c.globalStore(log, m))
	if err != nil {
		return fmt.Errorf("--mysql-dsn (global layer): %w", err)
	}
	cl.add(func() { _ = s.Close() })
	cfg.Global = &sluice.GlobalConfig{
		Store:           s,
		Interval:        c.GlobalInterval,
		DisableCounters: !c.GlobalCounters,
		DisableDenials:  !c.DenialPropagation,
		DenialMinWindow: max(c.DenialMinWindow, time.Millisecond),
		DenialMinUsage:  c.DenialMinUsage,
	}
	log.Info("global layer on", "store", "mysql", "interval", c.GlobalInterval,
		"counters", c.GlobalCounters, "denial_propagation", c.DenialPropagation, "read_replica", c.MySQLReadDSN != "")
	return nil
}

// globalMetrics exports the MySQL global store's calls and breaker as
// sluice_global_* metrics (the limiter's rounds are the server's metrics).
type globalMetrics struct {
	calls   *prometheus.CounterVec
	breaker prometheus.Gauge
}

var _ mysql.Observer = (*globalMetrics)(nil)

func newGlobalMetrics(reg prometheus.Registerer) *globalMetrics {
	m := &globalMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_global_store_calls_total",
			Help: "Calls of the MySQL global store by operation and outcome (ok, error, timeout, unavailable, rejected, canceled).",
		}, []string{"op", "outcome"}),
		breaker: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_global_breaker_state",
			Help: "Circuit breaker of the MySQL global store: 0 closed, 1 half-open, 2 open.",
		}),
	}
	reg.MustRegister(m.calls, m.breaker)
	return m
}

// ObserveCall implements [mysql.Observer].
func (m *globalMetrics) ObserveCall(c mysql.Call) {
	m.calls.WithLabelValues(string(c.Op), string(c.Outcome)).Inc()
}

// BreakerChanged implements [mysql.Observer].
func (m *globalMetrics) BreakerChanged(_, to mysql.BreakerState) {
	m.breaker.Set(float64(to))
}
