package main

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/origin/redis"
)

// TestRedisMasterMetrics feeds the Redis origin's metrics a Redis Cluster's
// calls and breaker changes: the calls and the breaker of each master are
// apart, and the origin's breaker gauge keeps what the origin reports.
func TestRedisMasterMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newRedisMetrics(reg)
	m.ObserveCall(redis.Call{Op: redis.OpApply, Outcome: redis.OutcomeOK, Master: "10.0.0.1:6379"})
	m.ObserveCall(redis.Call{Op: redis.OpApply, Outcome: redis.OutcomeTimeout, Master: "10.0.0.2:6379"})
	m.ObserveCall(redis.Call{Op: redis.OpLoad, Outcome: redis.OutcomeOK}) // a single Redis: no master
	m.MasterBreakerChanged("10.0.0.2:6379", redis.BreakerClosed, redis.BreakerOpen)
	m.BreakerChanged(redis.BreakerClosed, redis.BreakerOpen)
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"calls on the healthy master", value(t, m.masterCalls.WithLabelValues("10.0.0.1:6379", string(redis.OutcomeOK))), 1},
		{"timeouts on the frozen master", value(t, m.masterCalls.WithLabelValues("10.0.0.2:6379", string(redis.OutcomeTimeout))), 1},
		{"the frozen master's breaker", value(t, m.masterBreaker.WithLabelValues("10.0.0.2:6379")), 2},
		{"the origin's breaker", value(t, m.breaker), 2},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

// value returns the value of a counter or a gauge.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if c := d.GetCounter(); c != nil {
		return c.GetValue()
	}
	return d.GetGauge().GetValue()
}

// TestAnalyticsDropsAreCounted records more decisions at once than the
// analytics queue holds: those left out are counted in
// sluice_analytics_decisions_dropped_total.
func TestAnalyticsDropsAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	var cl cleanup
	defer cl.run()
	c := &serveCmd{AnalyticsFlags: AnalyticsFlags{Analytics: true, AnalyticsMaxNamespaces: 10}}
	a, err := c.newAnalytics(slog.New(slog.DiscardHandler), reg, &cl)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for range 100_000 {
		a.Record("w", "n", "i", true, now)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "sluice_analytics_decisions_dropped_total" {
			if v := f.GetMetric()[0].GetCounter().GetValue(); v < 1 {
				t.Fatalf("%v decisions counted dropped after 100,000 recorded at once", v)
			}
			return
		}
	}
	t.Fatal("sluice_analytics_decisions_dropped_total is not registered")
}
