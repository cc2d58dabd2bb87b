package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
)

// globalMetrics export the limiter's rounds of the global layer as
// sluice_global_* metrics. Their series appear with the first round, so a
// server without a global layer exports none of them.
type globalMetrics struct {
	rows    *prometheus.CounterVec
	rounds  *prometheus.CounterVec
	lag     *prometheus.HistogramVec
	regions *prometheus.GaugeVec
	leader  *prometheus.GaugeVec
	since   *prometheus.GaugeVec
	memory  *prometheus.GaugeVec
}

func newGlobalMetrics() globalMetrics {
	return globalMetrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_global_rows_total",
			Help: "Rows of the global layer by kind: published, pulled, denials_sent, denials_applied, denials_dropped, denials_left_out, cleaned.",
		}, []string{"kind"}),
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_global_rounds_total",
			Help: "Rounds of the global layer (publish, pull, denial sync) by outcome: ok or error.",
		}, []string{"outcome"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_global_round_seconds",
			Help:    "Duration of a global round; with the interval, it bounds how stale imported counts are.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}, nil),
		regions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_global_regions",
			Help: "Regions present at the last pull.",
		}, nil),
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_global_leader",
			Help: "1 while this node runs its region's global rounds (it holds the region's lease), else 0: exactly one node of a region shows 1.",
		}, nil),
		since: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_global_leader_since_seconds",
			Help: "Unix time at which the region's current leader took the lease, by the regional origin's clock (0 while nobody holds it).",
		}, nil),
		memory: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_global_leader_memory_bytes",
			Help: "Memory this node keeps as its region's leader between rounds, for the cells it handles (an estimate): its record of the other regions' counts it imported and of its region's counts it took and wrote; 0 on a node that does not lead.",
		}, nil),
	}
}

func (g globalMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.rows, g.rounds, g.lag, g.regions, g.leader, g.since, g.memory}
}

// GlobalRound implements [sluice.Observer].
func (m *Metrics) GlobalRound(st sluice.GlobalStats) {
	g := m.global
	for kind, n := range map[string]int{
		"published": st.Published, "pulled": st.Pulled, "denials_sent": st.DenialsSent,
		"denials_applied": st.DenialsSynced, "denials_dropped": st.DenialsLost, "denials_left_out": st.DenialsLeft,
		"cleaned": st.Cleaned,
	} {
		if n > 0 {
			g.rows.WithLabelValues(kind).Add(float64(n))
		}
	}
	if st.Regions > 0 {
		g.regions.WithLabelValues().Set(float64(st.Regions))
		g.lag.WithLabelValues().Observe(st.Elapsed.Seconds())
		g.memory.WithLabelValues().Set(float64(st.LeaderHeapBytes))
	}
	leader := 0.0
	if st.Leader {
		leader = 1
	}
	g.leader.WithLabelValues().Set(leader)
	g.since.WithLabelValues().Set(float64(st.LeaderSince) / 1000)
	outcome := "ok"
	if st.Err != nil {
		outcome = "error"
	}
	g.rounds.WithLabelValues(outcome).Inc()
}
