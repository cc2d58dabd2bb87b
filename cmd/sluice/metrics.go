package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/origin/redis"
	"github.com/sluicehq/sluice/server/rls"
)

// redisMetrics are the Redis origin's Prometheus metrics; they implement
// its [redis.MasterObserver]. On a Redis Cluster, sluice_redis_breaker_state
// is the most severe of the masters' breakers, and the two master metrics
// say which master is at fault.
type redisMetrics struct {
	calls         *prometheus.HistogramVec
	breaker       prometheus.Gauge
	masterBreaker *prometheus.GaugeVec
	masterCalls   *prometheus.CounterVec
}

func newRedisMetrics(reg prometheus.Registerer) *redisMetrics {
	m := &redisMetrics{
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_redis_call_duration_seconds", Help: "Redis origin calls by operation and outcome.",
			Buckets: prometheus.ExponentialBuckets(.0001, 4, 8),
		}, []string{"op", "outcome"}),
		breaker: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_redis_breaker_state", Help: "Redis origin circuit breaker: 0 closed, 1 half-open, 2 open (on a Redis Cluster, the most severe master's).",
		}),
		masterBreaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_redis_master_breaker_state", Help: "Circuit breaker of each Redis Cluster master the origin calls: 0 closed, 1 half-open, 2 open.",
		}, []string{"master"}),
		masterCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_master_calls_total", Help: "Redis origin calls by Redis Cluster master and outcome.",
		}, []string{"master", "outcome"}),
	}
	reg.MustRegister(m.calls, m.breaker, m.masterBreaker, m.masterCalls)
	return m
}

var _ redis.MasterObserver = (*redisMetrics)(nil)

// ObserveCall implements [redis.Observer].
func (m *redisMetrics) ObserveCall(c redis.Call) {
	m.calls.WithLabelValues(string(c.Op), string(c.Outcome)).Observe(c.Elapsed.Seconds())
	if c.Master != "" {
		m.masterCalls.WithLabelValues(c.Master, string(c.Outcome)).Inc()
	}
}

// BreakerChanged implements [redis.Observer].
func (m *redisMetrics) BreakerChanged(_, to redis.BreakerState) { m.breaker.Set(breakerValue(to)) }

// MasterBreakerChanged implements [redis.MasterObserver].
func (m *redisMetrics) MasterBreakerChanged(master string, _, to redis.BreakerState) {
	m.masterBreaker.WithLabelValues(master).Set(breakerValue(to))
}

// breakerValue is a breaker state as the gauges hold it.
func breakerValue(s redis.BreakerState) float64 {
	switch s.String() {
	case "open":
		return 2
	case "half-open":
		return 1
	}
	return 0
}

// rlsMetrics are the Envoy RLS service's Prometheus metrics; they implement
// its [rls.Observer].
type rlsMetrics struct {
	requests *prometheus.CounterVec
	reloads  *prometheus.CounterVec
}

func newRLSMetrics(reg prometheus.Registerer) *rlsMetrics {
	m := &rlsMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rls_requests_total", Help: "Envoy RLS ShouldRateLimit calls by configured domain and outcome.",
		}, []string{"domain", "outcome"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rls_config_reloads_total", Help: "Envoy RLS configuration reloads (SIGHUP) by result.",
		}, []string{"result"}),
	}
	reg.MustRegister(m.requests, m.reloads)
	return m
}

var _ rls.Observer = (*rlsMetrics)(nil)

// Decided implements [rls.Observer]. The domain is "" for domains the
// configuration does not know, which bounds the labels.
func (m *rlsMetrics) Decided(domain string, outcome rls.Outcome) {
	m.requests.WithLabelValues(domain, string(outcome)).Inc()
}

// reloaded counts one reload of the Envoy RLS configuration.
func (m *rlsMetrics) reloaded(err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.reloads.WithLabelValues(result).Inc()
}
