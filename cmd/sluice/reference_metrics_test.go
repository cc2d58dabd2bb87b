package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/server"
)

// metricsPage is docs/reference/metrics.md.
var metricsPage = referencePage{
	path:    "../../docs/reference/metrics.md",
	command: "go test ./cmd/sluice -run TestMetricsReference -update",
}

// metricSource is one place where `sluice serve` registers metrics, and
// when it does.
type metricSource struct {
	when     string // the configuration under which serve registers them
	register func(prometheus.Registerer)
}

// metricSources are every registration of sluice_* metrics that `sluice
// serve` makes, with the same constructors (newObservability, limitConns,
// newTLSCertificates, newGlobal, newClusterOrigin, newAnalytics).
// TestMetricsReference fails when a metric name in the code is left out.
var metricSources = []metricSource{
	{"always", func(reg prometheus.Registerer) {
		server.NewMetrics(reg)
		newRedisMetrics(reg)
		newRLSMetrics(reg)
		newConnMetrics(reg, apiListener, firstRequestTimeout, func() float64 { return 0 })
	}},
	{"unless `--analytics=false`", func(reg prometheus.Registerer) {
		registerAnalyticsMetrics(reg, func() float64 { return 0 })
	}},
	{"`--tls-cert`", func(reg prometheus.Registerer) { newTLSMetrics(reg) }},
	{"`--rls-addr`", func(reg prometheus.Registerer) {
		newConnMetrics(reg, rlsListener, firstRequestTimeout, func() float64 { return 0 })
	}},
	{"`--mysql-dsn`", func(reg prometheus.Registerer) { newGlobalMetrics(reg) }},
	{"`--origin cluster`", func(reg prometheus.Registerer) { newClusterObserver(reg) }},
}

// TestMetricsReference fails when the metrics listed in
// docs/reference/metrics.md differ from those `sluice serve` registers,
// or when a metric name defined in the code is not listed. Regenerate the
// page with:
//
//	go test ./cmd/sluice -run TestMetricsReference -update
func TestMetricsReference(t *testing.T) {
	families, err := describeMetrics(metricSources)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkEveryMetricListed(families, "../.."); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	writeMetricsReference(&out, families)
	checkReferencePage(t, metricsPage, out.Bytes())
}

// metricFamily is one metric as the reference lists it.
type metricFamily struct {
	name, kind, help string
	labels           []string
	when             string
}

// recordingRegisterer is a registry that remembers the collectors
// registered with it.
type recordingRegisterer struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

// Register registers c and remembers it.
func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registry.Register(c)
}

// MustRegister registers cs and remembers them.
func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// describeMetrics registers the metrics of every source, each on a registry
// of its own, and describes each family: its name and help from the
// collectors' descriptions (so that a metric whose series appear only
// with traffic is listed too), its type and labels from a series of each
// (made, for a vector, with placeholder label values).
func describeMetrics(sources []metricSource) ([]metricFamily, error) {
	var out []metricFamily
	seen := map[string]bool{}
	for _, src := range sources {
		reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
		src.register(reg)
		described, err := describedNames(reg.collectors)
		if err != nil {
			return nil, err
		}
		for _, c := range reg.collectors {
			if err := addSeries(c); err != nil {
				return nil, err
			}
		}
		gathered, err := reg.Gather()
		if err != nil {
			return nil, fmt.Errorf("gather (%s): %w", src.when, err)
		}
		for _, mf := range gathered {
			if !described[mf.GetName()] {
				return nil, fmt.Errorf("%s is gathered but not described by its collector", mf.GetName())
			}
			delete(described, mf.GetName())
			if seen[mf.GetName()] {
				return nil, fmt.Errorf("%s is registered by two sources", mf.GetName())
			}
			seen[mf.GetName()] = true
			out = append(out, familyOf(mf, src.when))
		}
		for name := range described {
			return nil, fmt.Errorf("%s is described but has no series to tell its type", name)
		}
	}
	slices.SortFunc(out, func(a, b metricFamily) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// describedNames returns the metric names the collectors describe.
func describedNames(cs []prometheus.Collector) (map[string]bool, error) {
	names := map[string]bool{}
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	var err error
	for d := range ch {
		m := name.FindStringSubmatch(d.String())
		if m == nil {
			err = fmt.Errorf("no name in the description %s", d)
			continue
		}
		names[m[1]] = true
	}
	return names, err
}

// addSeries gives a vector one series, with placeholder label values, so
// that it is gathered; other collectors make their own.
func addSeries(c prometheus.Collector) error {
	var get func(...string) error
	switch v := c.(type) {
	case *prometheus.CounterVec:
		get = func(l ...string) error { _, err := v.GetMetricWithLabelValues(l...); return err }
	case *prometheus.GaugeVec:
		get = func(l ...string) error { _, err := v.GetMetricWithLabelValues(l...); return err }
	case *prometheus.HistogramVec:
		get = func(l ...string) error { _, err := v.GetMetricWithLabelValues(l...); return err }
	case *prometheus.SummaryVec:
		get = func(l ...string) error { _, err := v.GetMetricWithLabelValues(l...); return err }
	default:
		return nil
	}
	// The number of labels is the one the vector accepts.
	var errs []error
	for n := range 16 {
		err := get(slices.Repeat([]string{"x"}, n)...)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("no label count fits the vector %T: %w", c, errors.Join(errs...))
}

// familyOf describes a gathered family.
func familyOf(mf *dto.MetricFamily, when string) metricFamily {
	f := metricFamily{name: mf.GetName(), help: mf.GetHelp(), when: when,
		kind: strings.ToLower(mf.GetType().String())}
	if ms := mf.GetMetric(); len(ms) > 0 {
		for _, l := range ms[0].GetLabel() {
			f.labels = append(f.labels, l.GetName())
		}
	}
	return f
}

// writeMetricsReference writes the generated part of the metrics
// reference: one table of every metric, sorted by name.
func writeMetricsReference(w io.Writer, families []metricFamily) {
	fmt.Fprintf(w, "\n## Every metric\n\n%d metrics, sorted by name. *Registered* says when `sluice serve` registers the metric (its series may appear only with traffic).\n\n", len(families))
	fmt.Fprintf(w, "| metric | type | labels | registered | description |\n|---|---|---|---|---|\n")
	for _, f := range families {
		labels := "–"
		if len(f.labels) > 0 {
			labels = "`" + strings.Join(f.labels, "`, `") + "`"
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s |\n", f.name, f.kind, labels, f.when, mdCell(f.help))
	}
}

// checkEveryMetricListed fails for a metric name that a Go file of the
// module under root (tests left out) defines, as `Name: "sluice_…"` or as
// the metrics prefix of a capped listener, and that families lack: a
// metric registered somewhere metricSources does not know.
func checkEveryMetricListed(families []metricFamily, root string) error {
	listed := make([]string, len(families))
	for i, f := range families {
		listed[i] = f.name
	}
	def := regexp.MustCompile(`\b(Name|metrics):\s*"(sluice_[a-z0-9_]+)"`)
	var missing []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "tools"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		src, err := os.ReadFile(path)
		for _, m := range def.FindAllStringSubmatch(string(src), -1) {
			name, prefix := m[2], m[1] == "metrics"
			if !slices.ContainsFunc(listed, func(l string) bool { return l == name || prefix && strings.HasPrefix(l, name+"_") }) {
				missing = append(missing, fmt.Sprintf("%s (%s)", name, path))
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("metrics defined in the code but registered by no metricSources entry (add where serve registers them): %s", strings.Join(missing, ", "))
	}
	return nil
}

// TestCheckEveryMetricListed checks that a metric name defined in the code,
// whole or as a listener's prefix, fails the reference when no listed
// metric has it.
func TestCheckEveryMetricListed(t *testing.T) {
	listed := []metricFamily{{name: "sluice_a_total"}, {name: "sluice_conns_open"}}
	for _, tc := range []struct {
		name, src string
		wantErr   bool
	}{
		{"listed name", `x := prometheus.CounterOpts{Name: "sluice_a_total"}`, false},
		{"unlisted name", `x := prometheus.CounterOpts{Name: "sluice_b_total"}`, true},
		{"listed prefix", `l := connListener{metrics: "sluice_conns"}`, false},
		{"unlisted prefix", `l := connListener{metrics: "sluice_other"}`, true},
		{"a table, not a metric", `const table = "sluice_version"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "m.go"), []byte("package m\n\n"+tc.src+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := checkEveryMetricListed(listed, dir); (err != nil) != tc.wantErr {
				t.Errorf("error %v, want an error: %v", err, tc.wantErr)
			}
		})
	}
}
