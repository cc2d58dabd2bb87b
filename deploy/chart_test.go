package deploy

import (
	"fmt"
	"net"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// Secrets of the test's values: none may appear in the container's
// arguments or plain environment.
const (
	testRootKey       = "rk-chart-test-root-key-0001"
	testClusterSecret = "chart-test-cluster-secret-0123456789abcdef"
)

// chartCase is one rendering of the chart.
type chartCase struct {
	name   string
	values map[string]any
	// existing are the Secrets the values name but the chart does not
	// write (name, key, content): the boot mounts them as Kubernetes would.
	existing map[string]map[string]string
	kinds    []string // the kinds rendered, sorted
	secrets  []string // values that must stay out of args and plain env
}

// chartCases are the renderings of TestChart; redisURL and mysqlDSN point
// at the test's services so that the rendered pods can start.
func chartCases(redisURL, mysqlDSN, region string) []chartCase {
	own := map[string]any{"rootKeys": []string{testRootKey + ":ws"}}
	return []chartCase{{
		name:    "cluster with the chart's Secret",
		values:  map[string]any{"mode": "cluster", "auth": own, "cluster": map[string]any{"secret": testClusterSecret}},
		kinds:   []string{"PodDisruptionBudget", "Secret", "Service", "Service", "Service", "ServiceAccount", "StatefulSet"},
		secrets: []string{testRootKey, testClusterSecret},
	}, {
		name: "cluster with existing Secrets, RLS, ServiceMonitor and overrides",
		values: map[string]any{"mode": "cluster", "fullnameOverride": "edge-limiter", "region": "eu-west",
			"httpPort": 9090, "adminPort": 9091, "replicaCount": 5, "maxCounters": 200000,
			"auth":                map[string]any{"existingSecret": "api-keys", "existingSecretKey": "keys.txt", "rootKeySHA256s": []string{strings.Repeat("ab", 32) + ":ops"}},
			"cluster":             map[string]any{"existingSecret": "gossip", "existingSecretKey": "key", "gossipPort": 8946, "clusterDomain": "k8s.example", "preset": "wan"},
			"rls":                 map[string]any{"enabled": true, "port": 9081, "config": map[string]any{"edge.yaml": rlsRules}},
			"metrics":             map[string]any{"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}}},
			"podDisruptionBudget": map[string]any{"minAvailable": 3}, "serviceAccount": map[string]any{"create": false},
			"extraArgs": []string{"--max-conns=500", "--otel-sample-ratio=0.1"}, "logFormat": "text", "logLevel": "debug"},
		existing: map[string]map[string]string{"api-keys": {"keys.txt": "# keys\n" + testRootKey + ":ws\n"}, "gossip": {"key": testClusterSecret + "\n"}},
		kinds:    []string{"ConfigMap", "PodDisruptionBudget", "Service", "Service", "Service", "ServiceMonitor", "StatefulSet"},
		secrets:  []string{testRootKey, testClusterSecret},
	}, {
		name:    "redis with a URL and hashed root keys only",
		values:  map[string]any{"mode": "redis", "redis": map[string]any{"url": redisURL}, "auth": map[string]any{"rootKeySHA256s": []string{strings.Repeat("cd", 32) + ":ws"}}},
		kinds:   []string{"Deployment", "PodDisruptionBudget", "Service", "Service", "ServiceAccount"},
		secrets: nil,
	}, {
		name: "redis from a Secret with the global layer",
		values: map[string]any{"mode": "redis", "region": region, "auth": own, "redis": map[string]any{"existingSecret": "redis-creds"},
			"global": map[string]any{"existingSecret": "mysql-creds", "interval": "200ms"}, "podDisruptionBudget": map[string]any{"enabled": false}},
		existing: map[string]map[string]string{"redis-creds": {"redis-url": redisURL}, "mysql-creds": {"mysql-dsn": mysqlDSN}},
		kinds:    []string{"Deployment", "Secret", "Service", "Service", "ServiceAccount"},
		secrets:  []string{testRootKey, redisURL, mysqlDSN},
	}}
}

// TestChart renders the chart with the real `helm template` for each case
// of chartCases, lints it (`helm lint --strict`), checks its manifests
// (checkManifests), and starts the pod
// as rendered on loopback (bootPod); then it checks that values which
// could not start are refused at rendering, with a message.
func TestChart(t *testing.T) {
	helm := helmPath(t)
	redisURL := "redis://" + testenv.RedisAddr(t) + "/0"
	dsn := testenv.MySQLDSN(t)
	region := fmt.Sprintf("chart-%d", time.Now().UnixNano())
	for _, c := range chartCases(redisURL, dsn, region) {
		t.Run(c.name, func(t *testing.T) {
			docs, err := renderChart(t, helm, c.values)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			if err := lintChart(t, helm, c.values); err != nil {
				t.Errorf("helm lint --strict: %v", err)
			}
			w := checkManifests(t, c, docs)
			if t.Failed() {
				return
			}
			t.Run("boots", func(t *testing.T) { bootPod(t, c, docs, w) })
		})
	}
	t.Run("refused values", func(t *testing.T) { testRefusedValues(t, helm) })
}

// testRefusedValues checks that values that would not start stop the
// rendering with a message that names the fix.
func testRefusedValues(t *testing.T, helm string) {
	keys := map[string]any{"rootKeys": []string{testRootKey + ":ws"}}
	cases := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"no root key", map[string]any{"mode": "redis", "redis": map[string]any{"url": "redis://r:6379"}}, "no root key"},
		{"short root key", map[string]any{"mode": "redis", "redis": map[string]any{"url": "redis://r:6379"}, "auth": map[string]any{"rootKeys": []string{"short:ws"}}}, "at least 16 bytes"},
		{"cluster without secret", map[string]any{"mode": "cluster", "auth": keys}, "cluster.existingSecret"},
		{"short cluster secret", map[string]any{"mode": "cluster", "auth": keys, "cluster": map[string]any{"secret": "too-short"}}, "at least 32 bytes"},
		{"redis without URL", map[string]any{"mode": "redis", "auth": keys}, "redis.url"},
		{"password in the redis URL", map[string]any{"mode": "redis", "auth": keys, "redis": map[string]any{"url": "redis://:hunter2@r:6379"}}, "redis.existingSecret"},
		{"unknown mode", map[string]any{"mode": "memory", "auth": keys}, "want cluster or redis"},
		{"RLS without rules", map[string]any{"mode": "redis", "auth": keys, "redis": map[string]any{"url": "redis://r:6379"}, "rls": map[string]any{"enabled": true}}, "rls.config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, helm, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template: error %v; want one containing %q", err, tc.want)
			}
		})
	}
}

// checkManifests checks the rendered manifests of c and returns the
// workload.
func checkManifests(t *testing.T, c chartCase, docs []manifest) workload {
	t.Helper()
	var kinds []string
	for _, d := range docs {
		kinds = append(kinds, d.Kind)
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, c.kinds) {
		t.Errorf("kinds %v; want %v", kinds, c.kinds)
	}
	kind := "Deployment"
	if c.values["mode"] == "cluster" {
		kind = "StatefulSet"
	}
	m := find(docs, kind, "")
	if m == nil {
		t.Fatalf("no %s", kind)
	}
	var w workload
	m.decode(t, &w)
	pod := w.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers; want 1", len(pod.Containers))
	}
	if !subset(w.Spec.Selector.MatchLabels, w.Spec.Template.Metadata.Labels) || len(w.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("selector %v does not select the pod's labels %v", w.Spec.Selector.MatchLabels, w.Spec.Template.Metadata.Labels)
	}
	flags := checkFlags(t, pod.Containers[0].Args)
	checkNoSecrets(t, c, pod.Containers[0])
	checkSecretFiles(t, c, docs, pod, flags)
	checkSecurity(t, pod, flags)
	checkProbes(t, pod.Containers[0], flags)
	checkServices(t, docs, w, flags)
	if flags["origin"] == "cluster" {
		checkHeadless(t, docs, w, flags)
	}
	checkPDB(t, docs, w)
	checkRLS(t, docs, pod, flags)
	return w
}

// checkFlags checks that args are `serve` and flags of the form
// --name=value that `sluice serve` accepts (the real binary parses them:
// kong stops at an unknown flag or a malformed value before --help), and
// returns them by name (the last value of a repeated flag).
func checkFlags(t *testing.T, args []string) map[string]string {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args %q: want serve first", args)
	}
	flags := map[string]string{}
	for _, a := range args[1:] {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("arg %q: want --name=value", a)
		}
		flags[name] = value
	}
	out, err := exec.Command(binary, append(slices.Clone(args), "--help")...).CombinedOutput()
	if err != nil {
		t.Errorf("sluice %s --help: %v\n%s", strings.Join(args, " "), err, lastLines(string(out), 5))
	}
	return flags
}

// checkNoSecrets checks that no secret of c is in the container's
// arguments or plain environment, that no secret-bearing flag is set
// directly, and that every SLUICE_* variable comes from a Secret.
func checkNoSecrets(t *testing.T, c chartCase, ctr container) {
	t.Helper()
	for _, a := range ctr.Args {
		for _, s := range c.secrets {
			if strings.Contains(a, s) {
				t.Errorf("arg %q holds a secret", a)
			}
		}
		for _, f := range []string{"--root-key=", "--cluster-secret=", "--mysql-dsn="} {
			if strings.HasPrefix(a, f) {
				t.Errorf("arg %q: a secret as a flag", a)
			}
		}
	}
	for _, e := range ctr.Env {
		for _, s := range c.secrets {
			if strings.Contains(e.Value, s) {
				t.Errorf("env %s holds a secret in plain text", e.Name)
			}
		}
		if strings.HasPrefix(e.Name, "SLUICE_") && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Errorf("env %s: not from a Secret", e.Name)
		}
	}
}

// checkSecretFiles checks that --root-key-file and --cluster-secret-file
// name files of Secret volumes mounted read-only, whose Secret (the
// chart's or an existing one of c) holds the key.
func checkSecretFiles(t *testing.T, c chartCase, docs []manifest, pod podSpec, flags map[string]string) {
	t.Helper()
	want := []string{"root-key-file"}
	if flags["origin"] == "cluster" {
		want = append(want, "cluster-secret-file")
	}
	for _, f := range want {
		file, ok := flags[f]
		if !ok {
			if f == "root-key-file" && c.values["auth"].(map[string]any)["rootKeySHA256s"] != nil {
				continue // hashed keys only: nothing secret to mount
			}
			t.Errorf("no --%s", f)
			continue
		}
		v, readOnly := mountOf(pod, path.Dir(file))
		switch {
		case v == nil || v.Secret == nil:
			t.Errorf("--%s=%s: no Secret volume mounted at %s", f, file, path.Dir(file))
		case !readOnly:
			t.Errorf("--%s: volume %s is not mounted read-only", f, v.Name)
		default:
			if _, ok := secretFile(t, c, docs, v, path.Base(file)); !ok {
				t.Errorf("--%s=%s: Secret %s has no key for it", f, file, v.Secret.SecretName)
			}
		}
	}
}

// mountOf returns the volume mounted at dir and whether it is read-only.
func mountOf(pod podSpec, dir string) (*volume, bool) {
	for _, m := range pod.Containers[0].VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(dir) {
			continue
		}
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == m.Name {
				return &pod.Volumes[i], m.ReadOnly
			}
		}
	}
	return nil, false
}

// secretFile returns the content of the file name of the Secret volume v:
// from the Secret the chart renders, or from the existing Secrets of c.
func secretFile(t *testing.T, c chartCase, docs []manifest, v *volume, name string) (string, bool) {
	t.Helper()
	data := c.existing[v.Secret.SecretName]
	if m := find(docs, "Secret", v.Secret.SecretName); m != nil {
		var s secret
		m.decode(t, &s)
		data = s.StringData
	}
	for _, it := range v.Secret.Items {
		if it.Path == name {
			content, ok := data[it.Key]
			return content, ok
		}
	}
	return "", false
}

// checkSecurity checks a non-root, read-only, unprivileged container whose
// --data-dir is a writable emptyDir, without service links (which would
// set SLUICE_* variables that sluice reads as flags) or an API token.
func checkSecurity(t *testing.T, pod podSpec, flags map[string]string) {
	t.Helper()
	ctr := pod.Containers[0]
	psc, csc := pod.SecurityContext, ctr.SecurityContext
	switch {
	case !isTrue(psc.RunAsNonRoot) || !isTrue(csc.RunAsNonRoot):
		t.Errorf("runAsNonRoot: pod %v, container %v", psc.RunAsNonRoot, csc.RunAsNonRoot)
	case csc.RunAsUser == nil || *csc.RunAsUser == 0:
		t.Error("the container has no non-zero runAsUser (a scratch image has no user to name)")
	case !isTrue(csc.ReadOnlyRootFilesystem):
		t.Error("readOnlyRootFilesystem is not true")
	case csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case !slices.Contains(csc.Capabilities.Drop, "ALL"):
		t.Errorf("capabilities.drop %v; want ALL", csc.Capabilities.Drop)
	case pod.EnableServiceLinks == nil || *pod.EnableServiceLinks:
		t.Error("enableServiceLinks is not false")
	case pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken:
		t.Error("automountServiceAccountToken is not false")
	}
	if v, readOnly := mountOf(pod, flags["data-dir"]); v == nil || v.EmptyDir == nil || readOnly {
		t.Errorf("--data-dir=%s is not a writable emptyDir", flags["data-dir"])
	}
	if ctr.Resources.Requests["cpu"] == "" || ctr.Resources.Requests["memory"] == "" || ctr.Resources.Limits["memory"] == "" {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", ctr.Resources)
	}
	if !strings.HasPrefix(ctr.Image, "ghcr.io/sluicehq/sluice:") {
		t.Errorf("image %q", ctr.Image)
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// checkProbes checks the probes: startup and liveness on /healthz,
// readiness on /readyz, all on the container port of --admin-addr.
func checkProbes(t *testing.T, ctr container, flags map[string]string) {
	t.Helper()
	admin := portOf(t, flags["admin-addr"])
	for _, p := range []struct {
		name, path string
		probe      *probe
	}{{"startupProbe", "/healthz", ctr.StartupProbe}, {"livenessProbe", "/healthz", ctr.LivenessProbe}, {"readinessProbe", "/readyz", ctr.ReadinessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s httpGet", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s: path %s; want %s", p.name, p.probe.HTTPGet.Path, p.path)
		}
		if got := resolvePort(ctr, p.probe.HTTPGet.Port); got != admin {
			t.Errorf("%s: port %v is %d; want --admin-addr's %d", p.name, p.probe.HTTPGet.Port, got, admin)
		}
	}
}

// portOf returns the port of host:port.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return n
}

// resolvePort returns the container port that a probe's or a Service's
// port (a number or a port name) designates, or 0.
func resolvePort(ctr container, port any) int {
	switch p := port.(type) {
	case int:
		return p
	case string:
		for _, cp := range ctr.Ports {
			if cp.Name == p {
				return cp.ContainerPort
			}
		}
	}
	return 0
}

func subset(sub, super map[string]string) bool {
	for k, v := range sub {
		if super[k] != v {
			return false
		}
	}
	return true
}
