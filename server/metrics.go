package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin/redis"
	"github.com/sluicehq/sluice/server/rls"
)

// MaxNamespaceLabels bounds the distinct namespace label values of
// sluice_ratelimit_decisions_total; further namespaces are counted under
// namespace="_other" so that clients cannot grow the metric without bound.
const MaxNamespaceLabels = 1000

// Metrics are the server's Prometheus metrics (all named sluice_*). Create
// them with [NewMetrics]; they also implement [sluice.Observer] for the
// limiter's internal measurements.
type Metrics struct {
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	inFlight    prometheus.Gauge
	decisions   *prometheus.CounterVec
	storeUp     prometheus.Gauge
	storeReload *prometheus.HistogramVec
	originReads *prometheus.HistogramVec
	replays     *prometheus.HistogramVec
	backlog     prometheus.Gauge
	cells       prometheus.Gauge
	evicted     prometheus.Counter
	redisCalls  *prometheus.HistogramVec
	breaker     prometheus.Gauge
	rls         *prometheus.CounterVec
	rlsReloads  *prometheus.CounterVec

	mu     sync.Mutex
	labels map[string]bool
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_requests_total", Help: "HTTP requests by endpoint and status code.",
		}, []string{"endpoint", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_http_request_duration_seconds", Help: "HTTP request latency by endpoint.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"endpoint"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_http_requests_in_flight", Help: "HTTP requests being served.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_ratelimit_decisions_total", Help: "Rate-limit decisions by namespace and outcome (passed, denied).",
		}, []string{"namespace", "outcome"}),
		storeUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_store_up", Help: "1 if the last read of the override store succeeded, else 0.",
		}),
		storeReload: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_store_refresh_duration_seconds", Help: "Duration of override-store refreshes by result.",
			Buckets: prometheus.ExponentialBuckets(.0005, 4, 8),
		}, []string{"result"}),
		originReads: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_origin_read_duration_seconds", Help: "Synchronous origin reads by reason and result.",
			Buckets: prometheus.ExponentialBuckets(.0001, 4, 8),
		}, []string{"reason", "result"}),
		replays: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_replay_duration_seconds", Help: "Replay calls to the origin by result.",
			Buckets: prometheus.ExponentialBuckets(.0001, 4, 8),
		}, []string{"result"}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_replay_backlog_cells", Help: "Cells waiting to be replayed to the origin.",
		}),
		cells: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_cells_live", Help: "Counter cells kept in memory after the last janitor sweep.",
		}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_cells_evicted_total", Help: "Counter cells evicted by the janitor.",
		}),
		redisCalls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_redis_call_duration_seconds", Help: "Redis origin calls by operation and outcome.",
			Buckets: prometheus.ExponentialBuckets(.0001, 4, 8),
		}, []string{"op", "outcome"}),
		breaker: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_redis_breaker_state", Help: "Redis origin circuit breaker: 0 closed, 1 half-open, 2 open.",
		}),
		rls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rls_requests_total", Help: "Envoy RLS ShouldRateLimit calls by configured domain and outcome.",
		}, []string{"domain", "outcome"}),
		rlsReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rls_config_reloads_total", Help: "Envoy RLS configuration reloads (SIGHUP) by result.",
		}, []string{"result"}),
		labels: make(map[string]bool),
	}
	reg.MustRegister(m.requests, m.latency, m.inFlight, m.decisions, m.storeUp, m.storeReload,
		m.originReads, m.replays, m.backlog, m.cells, m.evicted, m.redisCalls, m.breaker,
		m.rls, m.rlsReloads)
	return m
}

func (m *Metrics) namespaceLabel(ns string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.labels[ns] {
		return ns
	}
	if len(m.labels) >= MaxNamespaceLabels {
		return "_other"
	}
	m.labels[ns] = true
	return ns
}

// decision counts one rate-limit decision.
func (m *Metrics) decision(namespace string, passed bool) {
	outcome := "denied"
	if passed {
		outcome = "passed"
	}
	m.decisions.WithLabelValues(m.namespaceLabel(namespace), outcome).Inc()
}

// StoreRefreshed records one refresh of the override cache; pass it as
// store.CacheConfig.OnRefresh.
func (m *Metrics) StoreRefreshed(elapsed time.Duration, err error) {
	if err != nil {
		m.storeUp.Set(0)
		m.storeReload.WithLabelValues("error").Observe(elapsed.Seconds())
		return
	}
	m.storeUp.Set(1)
	m.storeReload.WithLabelValues("ok").Observe(elapsed.Seconds())
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

var _ sluice.Observer = (*Metrics)(nil)

// OriginRead implements [sluice.Observer].
func (m *Metrics) OriginRead(reason sluice.ReadReason, elapsed time.Duration, err error) {
	m.originReads.WithLabelValues(string(reason), result(err)).Observe(elapsed.Seconds())
}

// Replayed implements [sluice.Observer].
func (m *Metrics) Replayed(_ int, elapsed time.Duration, err error) {
	m.replays.WithLabelValues(result(err)).Observe(elapsed.Seconds())
}

// ReplayBacklog implements [sluice.Observer].
func (m *Metrics) ReplayBacklog(cells int64) { m.backlog.Set(float64(cells)) }

// Swept implements [sluice.Observer].
func (m *Metrics) Swept(live, evicted int) {
	m.cells.Set(float64(live))
	m.evicted.Add(float64(evicted))
}

var _ redis.Observer = (*Metrics)(nil)

// ObserveCall implements the Redis origin's [redis.Observer].
func (m *Metrics) ObserveCall(c redis.Call) {
	m.redisCalls.WithLabelValues(string(c.Op), string(c.Outcome)).Observe(c.Elapsed.Seconds())
}

// BreakerChanged implements the Redis origin's [redis.Observer].
func (m *Metrics) BreakerChanged(_, to redis.BreakerState) {
	switch to.String() {
	case "open":
		m.breaker.Set(2)
	case "half-open":
		m.breaker.Set(1)
	default:
		m.breaker.Set(0)
	}
}

var _ rls.Observer = (*Metrics)(nil)

// Decided implements the Envoy RLS service's [rls.Observer]. The domain is
// "" for domains the configuration does not know, which bounds the labels.
func (m *Metrics) Decided(domain string, outcome rls.Outcome) {
	m.rls.WithLabelValues(domain, string(outcome)).Inc()
}

// RLSReloaded counts one reload of the Envoy RLS configuration.
func (m *Metrics) RLSReloaded(err error) {
	m.rlsReloads.WithLabelValues(result(err)).Inc()
}
