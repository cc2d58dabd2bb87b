package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
)

// TestGlobalRowsByKind checks that every count of a global round goes to
// its kind of sluice_global_rows_total.
func TestGlobalRowsByKind(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.GlobalRound(sluice.GlobalStats{
		Published: 1, Pulled: 2, DenialsSent: 3, DenialsSynced: 4, DenialsLost: 5, DenialsLeft: 6, Regions: 2,
	})
	for kind, want := range map[string]float64{
		"published": 1, "pulled": 2, "denials_sent": 3, "denials_applied": 4,
		"denials_dropped": 5, "denials_left_out": 6, "cleaned": 0,
	} {
		if got := counterValue(t, m.global.rows.WithLabelValues(kind)); got != want {
			t.Errorf("%s: %v, want %v", kind, got, want)
		}
	}
}
