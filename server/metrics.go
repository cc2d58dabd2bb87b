package server

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
)

// MaxNamespaceLabels bounds the distinct namespace label values of
// sluice_ratelimit_decisions_total; further namespaces are counted under
// namespace="_other" so that clients cannot grow the metric without bound.
const MaxNamespaceLabels = 1000

// Metrics are the server's Prometheus metrics (all named sluice_*). Create
// them with [NewMetrics]; they also implement [sluice.Observer] for the
// limiter's internal measurements. The metrics of the Redis origin and of
// the Envoy RLS service are the embedder's (cmd/sluice registers them), so
// that this package links neither.
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
	evictedBy   *prometheus.CounterVec
	dropped     *prometheus.CounterVec
	authFails   *prometheus.CounterVec
	global      globalMetrics

	// labels is a read-only snapshot of the namespace labels' counters,
	// replaced whole under mu when a namespace is added, so that a
	// decision only loads it; other holds the counters of "_other" once
	// the snapshot is full.
	labels atomic.Pointer[map[string]*decisionSeries]
	other  atomic.Pointer[decisionSeries]
	mu     sync.Mutex
}

// decisionSeries are the decision counters of one namespace label: denied
// and passed, made with the label, and reported, made on the label's first
// report (a namespace that never reports has no such series).
type decisionSeries struct {
	label          string
	denied, passed prometheus.Counter
	reported       atomic.Pointer[prometheus.Counter]
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
			Name: "sluice_ratelimit_decisions_total", Help: "Rate-limit decisions by namespace and outcome (passed, denied; reported: usage reported after the fact, counted whatever the limit).",
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
			Name: "sluice_replay_backlog_cells", Help: "Cells waiting to be replayed to the origin, queued or parked.",
		}),
		cells: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_cells_live", Help: "Counter cells kept in memory after the last janitor sweep.",
		}),
		evictedBy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cells_evicted_by_tenant_total",
			Help: "Counter cells evicted because memory was full or a tenant was over its cap, by tenant class (workspace: an HTTP API workspace; rls: an Envoy RLS domain).",
		}, []string{"class"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_replay_dropped_increments_total",
			Help: "Accepted increments given up on before the origin confirmed them, by reason (expired, refused, close).",
		}, []string{"reason"}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_cells_evicted_total", Help: "Counter cells evicted by the janitor.",
		}),
		authFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_auth_failures_total", Help: "Requests refused for want of a valid root key, by reason (missing, unknown_key).",
		}, []string{"reason"}),
	}
	empty := map[string]*decisionSeries{}
	m.labels.Store(&empty)
	m.authFails.WithLabelValues(AuthMissing)
	m.authFails.WithLabelValues(AuthUnknownKey)
	reg.MustRegister(m.requests, m.latency, m.inFlight, m.decisions, m.storeUp, m.storeReload,
		m.originReads, m.replays, m.backlog, m.cells, m.evicted, m.evictedBy, m.dropped, m.authFails)
	m.global = newGlobalMetrics()
	reg.MustRegister(m.global.collectors()...)
	return m
}

// authFailed counts one failed authentication.
func (m *Metrics) authFailed(reason string) { m.authFails.WithLabelValues(reason).Inc() }

// decisionCounters returns the decision counters of namespace's label: the
// namespace itself for the first MaxNamespaceLabels namespaces, "_other"
// beyond. A namespace already labelled, and any namespace once the labels
// are all taken, is answered without a lock; only a new namespace takes
// the mutex and copies the snapshot (at most MaxNamespaceLabels times).
func (m *Metrics) decisionCounters(ns string) *decisionSeries {
	labels := *m.labels.Load()
	if c := labels[ns]; c != nil {
		return c
	}
	if len(labels) >= MaxNamespaceLabels {
		if c := m.other.Load(); c != nil {
			return c
		}
	}
	return m.addLabel(ns)
}

// addLabel adds ns to the labels, or returns "_other"'s counters if they are
// all taken.
func (m *Metrics) addLabel(ns string) *decisionSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	labels := *m.labels.Load()
	if c := labels[ns]; c != nil {
		return c
	}
	if len(labels) >= MaxNamespaceLabels {
		if c := m.other.Load(); c != nil {
			return c
		}
		c := labels[otherLabel] // a namespace called "_other" shares its series
		if c == nil {
			c = m.counters(otherLabel)
		}
		m.other.Store(c)
		return c
	}
	next := make(map[string]*decisionSeries, len(labels)+1)
	for k, v := range labels {
		next[k] = v
	}
	c := m.counters(ns)
	next[ns] = c
	m.labels.Store(&next)
	return c
}

// otherLabel is the namespace label of the namespaces beyond
// MaxNamespaceLabels.
const otherLabel = "_other"

// counters returns the decision counters of label.
func (m *Metrics) counters(label string) *decisionSeries {
	return &decisionSeries{
		label:  label,
		denied: m.decisions.WithLabelValues(label, "denied"),
		passed: m.decisions.WithLabelValues(label, "passed"),
	}
}

// decision counts one rate-limit decision.
func (m *Metrics) decision(namespace string, passed bool) {
	c := m.decisionCounters(namespace)
	if passed {
		c.passed.Inc()
	} else {
		c.denied.Inc()
	}
}

// reported counts one report of usage after the fact, as outcome
// "reported".
func (m *Metrics) reported(namespace string) {
	c := m.decisionCounters(namespace)
	if r := c.reported.Load(); r != nil {
		(*r).Inc()
		return
	}
	r := m.decisions.WithLabelValues(c.label, "reported") // the same series, whoever makes it first
	c.reported.Store(&r)
	r.Inc()
}

// endpointCodes are the status codes the API answers with; their request
// counters are resolved once per endpoint.
var endpointCodes = []int{200, 400, 401, 403, 404, 405, 413, 415, 429, 500, 503}

// endpointMetrics are the request metrics of one endpoint, resolved once so
// that a request does not look up its label values.
type endpointMetrics struct {
	m        *Metrics
	name     string
	latency  prometheus.Observer
	requests map[int]prometheus.Counter // read-only after endpoint
}

func (m *Metrics) endpoint(name string) *endpointMetrics {
	em := &endpointMetrics{m: m, name: name, latency: m.latency.WithLabelValues(name), requests: make(map[int]prometheus.Counter, len(endpointCodes))}
	for _, code := range endpointCodes {
		em.requests[code] = m.requests.WithLabelValues(name, strconv.Itoa(code))
	}
	return em
}

// begin counts a request in flight.
func (em *endpointMetrics) begin() { em.m.inFlight.Inc() }

// end counts a finished request by status code and observes its latency.
func (em *endpointMetrics) end(code int, elapsed time.Duration) {
	em.m.inFlight.Dec()
	c, ok := em.requests[code]
	if !ok {
		c = em.m.requests.WithLabelValues(em.name, strconv.Itoa(code))
	}
	c.Inc()
	em.latency.Observe(elapsed.Seconds())
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
func (m *Metrics) OriginRead(reason string, elapsed time.Duration, err error) {
	m.originReads.WithLabelValues(reason, result(err)).Observe(elapsed.Seconds())
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

// Evicted implements [sluice.Observer]. An Envoy RLS domain's workspace
// holds a space, which no HTTP API workspace may (see package rls).
func (m *Metrics) Evicted(workspace string, cells int) {
	class := "workspace"
	if strings.Contains(workspace, " ") {
		class = "rls"
	}
	m.evictedBy.WithLabelValues(class).Add(float64(cells))
}

// Dropped implements [sluice.Observer].
func (m *Metrics) Dropped(reason string, _ int, increments int64) {
	m.dropped.WithLabelValues(reason).Add(float64(increments))
}
