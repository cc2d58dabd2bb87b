package sim

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// ScaleSeries is one dimension of the scale study: scenarios that differ
// from a common base point in that dimension only, and its value in each.
type ScaleSeries struct {
	Dimension string
	Values    []float64
	Scenarios []Scenario
}

// The scale study's base point: 100,000 identities picked by a Zipf
// distribution of exponent 1.1, two regions of four nodes, each identity
// allowed 10 requests per 10 s and sent 1 per second on average (load 1:
// 100,000 requests per second in all), one window, a global round every
// second. The window is short so that a run fits the simulator's bound
// on requests; docs/capacity.md says what that changes.
func scaleBase() Scenario {
	return Scenario{
		Regions: 2, Nodes: 4, Limit: 10, Window: 10 * time.Second, Windows: 1, Load: 1,
		Identifiers: 100_000, Skew: 1.1, GlobalInterval: time.Second,
		Band: Band{MinOverPct: 0, MaxOverPct: 100},
	}
}

// ScaleStudy returns the scale study: from the base point, identities from
// 10,000 to 300,000, nodes per region from 1 to 20, regions from 1 to 10,
// load from 0.5 to 10 times the limits, and limits from 10 to 1,000 for the
// same requests (both at 10,000 identities, to bound the requests). It
// runs in a few minutes on two cores.
func ScaleStudy() []ScaleSeries {
	vary := func(dim string, values []float64, set func(*Scenario, float64)) ScaleSeries {
		sr := ScaleSeries{Dimension: dim, Values: values}
		for _, v := range values {
			s := scaleBase()
			set(&s, v)
			s.Name = fmt.Sprintf("scale-%s-%s", dim, strings.ReplaceAll(fmtNum(v), ".", "p"))
			s.Description = fmt.Sprintf("Scale study, %s = %s: %d regions × %d nodes, %d identities (Zipf 1.1), load %s.",
				dim, fmtNum(v), s.Regions, s.Nodes, s.Identifiers, fmtNum(s.Load))
			sr.Scenarios = append(sr.Scenarios, s)
		}
		return sr
	}
	return []ScaleSeries{
		vary("identities", []float64{10_000, 30_000, 100_000, 300_000}, func(s *Scenario, v float64) { s.Identifiers = int(v) }),
		vary("nodes", []float64{1, 4, 20}, func(s *Scenario, v float64) { s.Nodes = int(v) }),
		vary("regions", []float64{1, 2, 4, 10}, func(s *Scenario, v float64) { s.Regions = int(v) }),
		vary("load", []float64{0.5, 1, 3, 10}, func(s *Scenario, v float64) { s.Identifiers, s.Load = 10_000, v }),
		// The same requests (one per second per identity) under larger
		// limits: how much further from its limit each counter runs.
		vary("limit", []float64{10, 100, 1000}, func(s *Scenario, v float64) {
			s.Identifiers, s.Limit, s.Load = 10_000, int64(v), 10/v
		}),
	}
}

// scaleCost is one cost the scale study tabulates.
type scaleCost struct {
	name string
	of   func(Result) float64
}

var scaleCosts = []scaleCost{
	{"Redis commands / request", func(r Result) float64 { return r.RedisCallsPerRequest }},
	{"Redis commands / s", func(r Result) float64 { return r.RedisCallsPerSecond }},
	{"MySQL rows / s", func(r Result) float64 { return r.MySQLRowsPerSecond }},
	{"MySQL statements / s", func(r Result) float64 { return r.MySQLStatementsPerSecond }},
	{"heap / node (MiB)", func(r Result) float64 { return round(float64(r.HeapBytesPerNode)/(1<<20), 2) }},
	{"origin bytes / node / s", func(r Result) float64 { return r.OriginBytesPerNodePerSecond }},
	{"over-admission %", func(r Result) float64 { return r.OverAdmission }},
}

// WriteScale writes the scale study's tables in Markdown: for each series,
// every cost at each value, then the exponent b of each cost fitted as
// cost ∝ value^b (least squares on logarithms, over the values where the
// cost is not 0; "–" where fewer than two are left), then how well such a
// fit extrapolates: each series' largest value predicted from a fit over
// the others, as predicted / measured.
// results holds each series' results, in order.
func WriteScale(w io.Writer, series []ScaleSeries, results [][]Result) error {
	var b bytes.Buffer
	for i, sr := range series {
		fmt.Fprintf(&b, "\n### %s\n\n| %s | requests |", sr.Dimension, sr.Dimension)
		for _, c := range scaleCosts {
			fmt.Fprintf(&b, " %s |", c.name)
		}
		b.WriteString("\n|---|---|" + string(bytes.Repeat([]byte("---|"), len(scaleCosts))) + "\n")
		for j, r := range results[i] {
			fmt.Fprintf(&b, "| %s | %d |", fmtNum(sr.Values[j]), r.Requests)
			for _, c := range scaleCosts {
				fmt.Fprintf(&b, " %s |", fmtNum(c.of(r)))
			}
			b.WriteString("\n")
		}
	}
	writeCostTable(&b, "Fitted exponents (cost ∝ dimension^b)", series, results, fitText)
	writeCostTable(&b, "Extrapolation checked: the largest value of each series predicted from the others (predicted / measured)", series, results, holdOutText)
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("sim: writing the scale tables: %w", err)
	}
	return nil
}

// writeCostTable writes a table of one figure per cost (rows) and series
// (columns), as cell computes it from a series' values and results.
func writeCostTable(b *bytes.Buffer, title string, series []ScaleSeries, results [][]Result, cell func([]float64, []float64) string) {
	fmt.Fprintf(b, "\n### %s\n\n| cost |", title)
	for _, sr := range series {
		fmt.Fprintf(b, " %s |", sr.Dimension)
	}
	b.WriteString("\n|---|" + string(bytes.Repeat([]byte("---|"), len(series))) + "\n")
	for _, c := range scaleCosts {
		fmt.Fprintf(b, "| %s |", c.name)
		for i, sr := range series {
			ys := make([]float64, len(results[i]))
			for j, r := range results[i] {
				ys[j] = c.of(r)
			}
			fmt.Fprintf(b, " %s |", cell(sr.Values, ys))
		}
		b.WriteString("\n")
	}
}

// fitText is the fitted exponent of ys over xs, or "–".
func fitText(xs, ys []float64) string {
	_, b, ok := fitPower(xs, ys)
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f", b)
}

// holdOutText predicts the last point of ys from a fit over the others and
// returns predicted / measured, or "–" when there is no fit over the others
// or nothing was measured at the last point.
func holdOutText(xs, ys []float64) string {
	n := min(len(xs), len(ys))
	if n < 3 || ys[n-1] <= 0 {
		return "–"
	}
	a, b, ok := fitPower(xs[:n-1], ys[:n-1])
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f", a*math.Pow(xs[n-1], b)/ys[n-1])
}

// fitPower fits y = a·x^b by least squares on (log x, log y) over the
// points where y is positive, and returns a and b; ok is false unless there
// are two such points with distinct xs.
func fitPower(xs, ys []float64) (a, b float64, ok bool) {
	var px, py []float64
	for i := range min(len(xs), len(ys)) {
		if ys[i] > 0 && xs[i] > 0 {
			px, py = append(px, xs[i]), append(py, ys[i])
		}
	}
	xs, ys = px, py
	if len(xs) < 2 {
		return 0, 0, false
	}
	var mx, my float64
	for i := range xs {
		mx += math.Log(xs[i])
		my += math.Log(ys[i])
	}
	n := float64(len(xs))
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for i := range xs {
		dx := math.Log(xs[i]) - mx
		sxy += dx * (math.Log(ys[i]) - my)
		sxx += dx * dx
	}
	if sxx == 0 {
		return 0, 0, false
	}
	b = sxy / sxx
	return math.Exp(my - b*mx), b, true
}
