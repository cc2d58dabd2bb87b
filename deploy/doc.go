// Package deploy holds no code: its tests check the deployment artifacts
// beside it against the real sluice binary.
//
//   - helm/sluice, the Helm chart of one region: rendered with the real
//     `helm template` in both modes (cluster and redis) and with values
//     overrides, its manifests are parsed and checked (flags that `sluice
//     serve` accepts, secrets mounted as files, the headless Service behind
//     --cluster-join, probes on the admin listener, a non-root read-only
//     container), and the pod as rendered is started on loopback and must
//     answer its readiness probe (TestChart).
//   - grafana/sluice.json, the Grafana dashboard: every metric that a
//     panel's PromQL names must be exported by real servers under traffic
//     (TestDashboard).
//
// docs/deploy-kubernetes.md describes both.
package deploy
