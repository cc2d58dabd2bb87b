package deploy

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The alert rules under test, their promtool unit tests, the chart's copy
// of the rules and the runbook they point at.
const (
	alertsPath      = "prometheus/alerts.yaml"
	alertsTestPath  = "prometheus/alerts_test.yaml"
	chartAlertsPath = "helm/sluice/files/alerts.yaml"
	runbookPath     = "../docs/operations.md"
)

// prometheusInstall is the command that installs prometheus and promtool
// (Debian's package prometheus); scripts/services.sh runs it.
const prometheusInstall = "scripts/services.sh (or: sudo apt-get install -y prometheus)"

// toolPath returns the executable name from PATH. Without it it skips t,
// or fails it under CI (the environment variable CI is set), where
// scripts/services.sh has installed it with install.
func toolPath(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := name + " is not installed; install it with " + install
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// ruleFile is a Prometheus rule file.
type ruleFile struct {
	Groups []struct {
		Name  string      `yaml:"name"`
		Rules []alertRule `yaml:"rules"`
	} `yaml:"groups"`
}

// alertRule is one alerting rule.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// loadAlerts parses alerts.yaml.
func loadAlerts(t *testing.T) ruleFile {
	t.Helper()
	raw, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	return f
}

// TestAlertRules runs the real promtool (Debian's package prometheus) on
// the alert rules: `promtool check rules` on alerts.yaml and `promtool
// test rules` on alerts_test.yaml, whose tests feed each alert series that
// fire it and series that must not. It then checks that every alert has a
// severity, a summary, a description and a runbook_url whose anchor is a
// heading of docs/operations.md, that every metric an alert names is
// defined by Sluice's code, and that the chart's copy of the rules is the
// same file. It skips without promtool, or fails when CI is set.
func TestAlertRules(t *testing.T) {
	promtool := toolPath(t, "promtool", prometheusInstall)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"check rules", []string{"check", "rules", alertsPath}},
		{"test rules", []string{"test", "rules", alertsTestPath}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out, err := exec.Command(promtool, tc.args...).CombinedOutput(); err != nil {
				t.Fatalf("promtool %s: %v\n%s", strings.Join(tc.args, " "), err, out)
			}
		})
	}
	t.Run("runbooks", checkRunbooks)
	t.Run("metrics", checkAlertMetrics)
	t.Run("chart copy", func(t *testing.T) {
		want, err := os.ReadFile(alertsPath)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(chartAlertsPath)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s: copy it (cp deploy/%s deploy/%s)", chartAlertsPath, alertsPath, alertsPath, chartAlertsPath)
		}
	})
}

// checkRunbooks fails for an alert without a severity, a summary, a description
// or a runbook_url pointing at a heading of docs/operations.md named
// after it.
func checkRunbooks(t *testing.T) {
	doc, err := os.ReadFile(runbookPath)
	if err != nil {
		t.Fatal(err)
	}
	const base = "https://github.com/sluicehq/sluice/blob/main/docs/operations.md#"
	rules := 0
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			rules++
			if r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: no summary or no description", r.Alert)
			}
			if want := base + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !bytes.Contains(doc, []byte("\n### "+r.Alert+"\n")) {
				t.Errorf("%s: %s has no heading \"### %s\"", r.Alert, runbookPath, r.Alert)
			}
		}
	}
	if rules == 0 {
		t.Fatalf("%s holds no rule", alertsPath)
	}
}

// checkAlertMetrics fails for each metric that an alert names and that no
// Go file of Sluice (tests left out) defines as a quoted name.
func checkAlertMetrics(t *testing.T) {
	defined := map[string]bool{}
	name := regexp.MustCompile(`"(sluice_[a-z0-9_]+)"`)
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		for _, m := range name.FindAllSubmatch(src, -1) {
			defined[string(m[1])] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			refs, err := parsePromQL(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
				continue
			}
			for _, m := range refs.metrics {
				if !defined[m] {
					t.Errorf("%s: metric %s is defined nowhere in Sluice's code", r.Alert, m)
				}
			}
		}
	}
}

// TestPrometheusRule renders the chart with the real `helm template`: by
// default no PrometheusRule; with prometheusRule.enabled one, labelled with
// prometheusRule.labels, whose groups are those of alerts.yaml, and which
// `helm lint --strict` accepts. It skips without helm, or fails when CI is
// set.
func TestPrometheusRule(t *testing.T) {
	helm := helmPath(t)
	on := map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}}
	for _, tc := range []struct {
		name string
		rule map[string]any // prometheusRule values; nil: the defaults
		want bool
	}{
		{"off by default", nil, false},
		{"enabled with labels", on, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{"auth": map[string]any{"rootKeys": []string{testRootKey + ":ws"}},
				"cluster": map[string]any{"secret": testClusterSecret}}
			if tc.rule != nil {
				values["prometheusRule"] = tc.rule
			}
			docs, err := renderChart(t, helm, values)
			if err != nil {
				t.Fatal(err)
			}
			if err := lintChart(t, helm, values); err != nil {
				t.Fatalf("helm lint --strict: %v", err)
			}
			m := find(docs, "PrometheusRule", "")
			if (m != nil) != tc.want {
				t.Fatalf("PrometheusRule rendered: %v, want %v", m != nil, tc.want)
			}
			if m != nil {
				checkPrometheusRule(t, *m)
			}
		})
	}
}

// checkPrometheusRule fails unless m is the Prometheus Operator's
// PrometheusRule holding exactly the groups of alerts.yaml.
func checkPrometheusRule(t *testing.T, m manifest) {
	t.Helper()
	if m.APIVersion != "monitoring.coreos.com/v1" || m.Metadata.Labels["release"] != "prom" {
		t.Errorf("PrometheusRule: apiVersion %q, labels %v: want monitoring.coreos.com/v1 and release=prom", m.APIVersion, m.Metadata.Labels)
	}
	var rendered struct {
		Spec map[string]any `yaml:"spec"`
	}
	m.decode(t, &rendered)
	raw, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rendered.Spec, want) {
		got, _ := yaml.Marshal(rendered.Spec)
		t.Errorf("the PrometheusRule's spec is not the rules of %s:\n%s", alertsPath, got)
	}
}
