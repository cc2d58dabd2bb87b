// Package deploy holds no code: its tests check the deployment artifacts
// beside it against the real sluice binary, Helm, Prometheus and promtool.
//
//   - helm/sluice, the Helm chart of one region: rendered with the real
//     `helm template` in both modes (cluster and redis) and with values
//     overrides, its manifests are parsed and checked (flags that `sluice
//     serve` accepts, secrets mounted as files, the headless Service behind
//     --cluster-join, probes on the admin listener, a non-root read-only
//     container), and the pod as rendered is started on loopback and must
//     answer its readiness probe (TestChart); its PrometheusRule, off by
//     default, holds the rules of prometheus/alerts.yaml
//     (TestPrometheusRule).
//   - grafana/sluice.json, the Grafana dashboard: every metric that a
//     panel's PromQL names must be exported by real servers under traffic
//     (TestDashboard), every query must parse (TestDashboardPromQLSyntax),
//     and a real Prometheus scraping two real servers on Redis must
//     evaluate every query, with data for each that belongs to that mode
//     (TestPrometheus).
//   - prometheus/alerts.yaml, the alerting rules: `promtool check rules`
//     and `promtool test rules` on prometheus/alerts_test.yaml, a runbook
//     section in docs/operations.md for each alert, only metrics that
//     Sluice defines, and the chart's copy identical (TestAlertRules); the
//     real Prometheus of TestPrometheus loads and evaluates them.
//
// docs/howto/kubernetes.md describes them.
package deploy
