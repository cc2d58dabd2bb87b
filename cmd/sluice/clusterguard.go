package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/origin/cluster"
)

// clusterObserver is the cluster origin's [cluster.Observer]: the metrics of
// its traffic (clusterMetrics), and those of what it turns away: the peer
// calls it refused and the log lines its rate limits dropped.
type clusterObserver struct {
	*clusterMetrics
	refused *prometheus.CounterVec
	dropped *prometheus.CounterVec
}

var _ cluster.Observer = clusterObserver{}

func newClusterObserver(reg prometheus.Registerer) clusterObserver {
	o := clusterObserver{
		clusterMetrics: newClusterMetrics(reg),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cluster_rpcs_refused_total",
			Help: "Peer calls this node refused, by reason (malformed, stale, misdirected, unknown_sender, too_large, busy, bad_mac, replayed, bad_request).",
		}, []string{"reason"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cluster_log_lines_dropped_total",
			Help: "Log lines of the gossip (memberlist) and of refused peer calls not written because they came faster than the rate limit (a burst of 10, then 1 per second per source), by source.",
		}, []string{"source"}),
	}
	for _, r := range []cluster.RefuseReason{cluster.ReasonMalformed, cluster.ReasonStale, cluster.ReasonMisdirected,
		cluster.ReasonUnknownSender, cluster.ReasonTooLarge, cluster.ReasonBusy, cluster.ReasonBadMAC,
		cluster.ReasonReplayed, cluster.ReasonBadRequest} {
		o.refused.WithLabelValues(string(r))
	}
	o.dropped.WithLabelValues(cluster.LogGossip)
	o.dropped.WithLabelValues(cluster.LogRPC)
	reg.MustRegister(o.refused, o.dropped)
	return o
}

// Refused implements [cluster.Observer].
func (o clusterObserver) Refused(reason cluster.RefuseReason) {
	o.refused.WithLabelValues(string(reason)).Inc()
}

// LogDropped implements [cluster.Observer].
func (o clusterObserver) LogDropped(source string) { o.dropped.WithLabelValues(source).Inc() }
