package sim

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Report is the results of one invocation: every scenario run with one seed.
type Report struct {
	Seed    uint64   `json:"seed"`
	Results []Result `json:"scenarios"`
}

// Failed returns the names of the scenarios that left their band.
func (r Report) Failed() []string {
	var out []string
	for _, res := range r.Results {
		if !res.InBand {
			out = append(out, res.Scenario)
		}
	}
	return out
}

// WriteJSON writes the report as indented JSON (results.json).
func (r Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("sim: encoding results: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("sim: writing results: %w", err)
	}
	return nil
}

// WriteSummary writes the summary table of the report in Markdown.
func (r Report) WriteSummary(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| scenario | topology | load | admitted / reference | over | under | worst span (model) | origin calls / request | global rows / request | band | in band |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, res := range r.Results {
		fmt.Fprintf(&b, "| %s | %s | %s× | %d / %d | %s%% | %s%% | %s× (%s×) | %s | %s | %s | %s |\n",
			res.Scenario, topology(res), fmtNum(res.Load), res.Admitted, res.Reference,
			fmtPct(res.OverPct), fmtPct(res.UnderPct), fmtNum(res.WorstSpan), fmtNum(res.ReferenceWorstSpan),
			fmtNum(res.Origin.PerRequest), fmtNum(res.Global.RowsPerRequest), bandText(res.Band), yesNo(res.InBand))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("sim: writing the summary: %w", err)
	}
	return nil
}

// WriteMarkdown writes report.md: the summary table, then a section per
// scenario with its figures and its chart (NAME.svg, beside the report).
func (r Report) WriteMarkdown(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Simulated accuracy (seed %d)\n\n", r.Seed)
	b.WriteString("Written by `sluice sim` ([docs/simulator.md](../simulator.md) explains the simulation and every figure). ")
	b.WriteString("Over-admission is what the deployment admitted above the exact single-node model, ")
	b.WriteString("per identifier and fixed window, as a share of what the model admitted.\n\n")
	if err := r.WriteSummary(&b); err != nil {
		return err
	}
	for _, res := range r.Results {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", res.Scenario, res.Description)
		b.WriteString("| figure | value |\n|---|---|\n")
		row := func(k, format string, args ...any) { fmt.Fprintf(&b, "| %s | %s |\n", k, fmt.Sprintf(format, args...)) }
		row("topology", "%s, traffic %s, replay every %s", topology(res), res.Traffic, res.ReplayInterval)
		if res.Origin.Kind == OriginCluster {
			row("cluster mode", "each identity's count on its owner node; a lost node leaves the ring %s later", res.FailureDetection)
		}
		if res.ReplayLatency != "" {
			jitter := ""
			if res.ReplayJitter != "" {
				jitter = " + up to " + res.ReplayJitter
			}
			row("replay latency", "%s%s", res.ReplayLatency, jitter)
		}
		if res.GlobalInterval != "" {
			lag := ""
			if res.GlobalLatency != "" {
				lag = ", writes visible to the other regions " + res.GlobalLatency + " later"
			}
			row("global layer", "a round every %s%s", res.GlobalInterval, lag)
		}
		row("limit", "%d per %s for each of %d identifiers, %d windows", res.Limit, res.Window, res.Identifiers, res.Windows)
		row("load", "%s× the limit: %d requests", fmtNum(res.Load), res.Requests)
		row("admitted / reference", "%d / %d (%s%s%%)", res.Admitted, res.Reference, sign(res.DeltaPct), fmtPct(res.DeltaPct))
		row("over / under", "%s%% / %s%%", fmtPct(res.OverPct), fmtPct(res.UnderPct))
		row("worst span", "%s× the limit (%s; the model %s×)", fmtNum(res.WorstSpan), res.WorstIdentifier, fmtNum(res.ReferenceWorstSpan))
		row("origin calls", "%d loads, %d applies, %d decides (%d refused by an outage): %s per request",
			res.Origin.Loads, res.Origin.Applies, res.Origin.Decides, res.Origin.Failed, fmtNum(res.Origin.PerRequest))
		if res.Origin.RPCs > 0 {
			row("peer RPCs", "%d: %s per request", res.Origin.RPCs, fmtNum(res.Origin.RPCsPerRequest))
		}
		if res.Regions > 1 {
			row("global store", "%d calls (%d refused by an outage), %d count rows, %d denial rows: %s rows per request",
				res.Global.Calls, res.Global.Failed, res.Global.PublishedRows, res.Global.DenialRows, fmtNum(res.Global.RowsPerRequest))
		}
		costRows(row, res)
		if sp := res.DenialSpread; sp != nil && sp.Samples > 0 {
			row("denial spread", "after one region denies an identifier's window, the others deny it %s later (median; at most %s, %d cases)",
				fmtMs(sp.MedianMs), fmtMs(sp.MaxMs), sp.Samples)
		}
		if res.Band != nil {
			row("band", "%s: %s", res.Band, map[bool]string{true: "in band", false: "**out of band**"}[res.InBand])
		}
		fmt.Fprintf(&b, "\n![%s: admitted per window against the limit](%s.svg)\n", res.Scenario, res.Scenario)
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("sim: writing the report: %w", err)
	}
	return nil
}

// costRows writes the rows of res's resource costs (see Costs).
func costRows(row func(k, format string, args ...any), res Result) {
	if res.Origin.Kind != OriginCluster {
		by := res.RedisCallsByCall
		row("Redis (modelled)", "%s commands per request (loads %s, replays %s, decisions %s), %s per second; %s bytes sent per node per second; %s keys written per request (the least any store with a key per identity and window needs)",
			fmtNum(res.RedisCallsPerRequest), fmtNum(by.Load), fmtNum(by.Apply), fmtNum(by.Decide),
			fmtNum(res.RedisCallsPerSecond), fmtNum(res.OriginBytesPerNodePerSecond), fmtNum(res.RedisKeysWrittenPerRequest))
	}
	if res.Regions > 1 {
		row("MySQL (modelled)", "%s rows and %s statements per second", fmtNum(res.MySQLRowsPerSecond), fmtNum(res.MySQLStatementsPerSecond))
	}
	if res.LeaderHeapBytes > 0 {
		row("memory", "at most %d cells on one node, and %s KiB a leader kept: %s KiB of heap", res.CellsPerNode,
			fmtNum(round(float64(res.LeaderHeapBytes)/1024, 1)), fmtNum(round(float64(res.HeapBytesPerNode)/1024, 1)))
		return
	}
	row("memory", "at most %d cells on one node: %s KiB of heap", res.CellsPerNode, fmtNum(round(float64(res.HeapBytesPerNode)/1024, 1)))
}

// WriteFiles writes report.md, results.json and one NAME.svg per scenario
// into dir, creating it if needed.
func (r Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	write := func(name string, render func(io.Writer) error) error {
		var b bytes.Buffer
		if err := render(&b); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		return nil
	}
	if err := write("report.md", r.WriteMarkdown); err != nil {
		return err
	}
	if err := write("results.json", r.WriteJSON); err != nil {
		return err
	}
	for _, res := range r.Results {
		if err := write(res.Scenario+".svg", res.WriteSVG); err != nil {
			return err
		}
	}
	return nil
}

func bandText(b *Band) string {
	if b == nil {
		return "–"
	}
	return b.String()
}

// fmtMs formats milliseconds as a duration (1.2s, 340ms).
func fmtMs(ms int64) string { return fmtDuration(time.Duration(ms) * time.Millisecond) }

func topology(r Result) string {
	t := fmt.Sprintf("%d %s × %d %s", r.Regions, plural(r.Regions, "region", "regions"), r.Nodes, plural(r.Nodes, "node", "nodes"))
	if r.Origin.Kind == OriginCluster {
		t += " (cluster)"
	}
	return t
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

func sign(x float64) string {
	if fmtPct(x) != "0" && x > 0 {
		return "+"
	}
	return ""
}

// fmtNum formats a figure with at most 4 decimals and no trailing zeros.
func fmtNum(x float64) string {
	s := fmt.Sprintf("%.4f", round(x, 4))
	s = strings.TrimRight(s, "0")
	s = strings.TrimSuffix(s, ".")
	if s == "-0" {
		s = "0"
	}
	return s
}

// The chart's geometry, in SVG user units.
const (
	svgW, svgH                           = 800.0, 440.0
	plotL, plotR, plotT, plotB           = 80.0, 590.0, 70.0, 370.0
	legendX                              = 610.0
	colorLimit, colorTotal, colorModel   = "#d62728", "#111111", "#7f7f7f"
	fontFamily                           = "DejaVu Sans, Helvetica, Arial, sans-serif"
	svgHeader                            = `<svg xmlns="http://www.w3.org/2000/svg" width="800" height="440" viewBox="0 0 800 440" font-family="` + fontFamily + `">`
	gridColor                            = "#dddddd"
	axisColor                            = "#333333"
	markerRadius                         = 3.5
	thinStroke, thickStroke, limitStroke = 1.5, 4.0, 2.0
	modelStroke                          = 2.5
)

// palette colours the series of nodes or regions.
var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}

// WriteSVG draws the run's chart: admitted per fixed window, as the mean
// over identifiers, of each node (or region), their total and the exact
// model, against the limit line, with axes, a legend and a title.
func (r Result) WriteSVG(w io.Writer) error {
	c := newChart(r)
	c.heading()
	c.axes()
	c.faults()
	c.plot()
	c.legend()
	c.b.WriteString("</svg>\n")
	if _, err := w.Write(c.b.Bytes()); err != nil {
		return fmt.Errorf("sim: writing the chart of %s: %w", r.Scenario, err)
	}
	return nil
}

// chart is the SVG of one Result being drawn: the scale of its plot, and
// the text so far.
type chart struct {
	b     bytes.Buffer
	r     Result
	n     int       // windows
	ids   float64   // identifiers, at least 1: the chart shows means over them
	total []float64 // the mean admitted per window, all nodes or regions together
	step  float64   // between the y ticks
	yMax  float64   // the top of the y axis
}

// newChart returns an empty chart of r, its y axis scaled to show the
// limit, the total and the model with room to spare, in round ticks.
func newChart(r Result) *chart {
	c := &chart{r: r, n: len(r.ReferenceSeries), ids: float64(max(r.Identifiers, 1))}
	c.total = make([]float64, c.n)
	for _, s := range r.Series {
		for i, v := range s.Admitted {
			c.total[i] += float64(v) / c.ids
		}
	}
	top := float64(r.Limit)
	for i := range c.n {
		top = max(top, c.total[i], float64(r.ReferenceSeries[i])/c.ids)
	}
	c.step = niceStep(top * 1.15 / 5)
	c.yMax = math.Ceil(top*1.15/c.step) * c.step
	return c
}

// x returns the abscissa of the middle of window i.
func (c *chart) x(i int) float64 { return plotL + (float64(i)+0.5)*(plotR-plotL)/float64(c.n) }

// y returns the ordinate of the value v.
func (c *chart) y(v float64) float64 { return plotB - v/c.yMax*(plotB-plotT) }

// means returns vals, admissions per window, as means over the identifiers.
func (c *chart) means(vals []int64) []float64 {
	out := make([]float64, c.n)
	for i, v := range vals {
		out[i] = float64(v) / c.ids
	}
	return out
}

// heading writes the start of the document: its title and description,
// the background, and the chart's title and subtitle.
func (c *chart) heading() {
	r := c.r
	c.b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" + svgHeader + "\n")
	fmt.Fprintf(&c.b, "<title>%s</title>\n<desc>%s</desc>\n", esc(r.Scenario+": admitted per window against the limit"), esc(r.Description))
	fmt.Fprintf(&c.b, `<rect width="%g" height="%g" fill="#ffffff"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&c.b, `<text x="%g" y="28" font-size="18" font-weight="bold">%s</text>`+"\n", plotL, esc(r.Scenario+": admitted per window vs. the limit"))
	band := ""
	if r.Band != nil {
		band = " (band " + r.Band.String() + ")"
	}
	fmt.Fprintf(&c.b, `<text x="%g" y="50" font-size="12" fill="#444444">%s</text>`+"\n", plotL, esc(fmt.Sprintf(
		"%s, %s× the limit, mean of %d identifiers; over-admission %s%%%s",
		topology(r), fmtNum(r.Load), r.Identifiers, fmtPct(r.OverPct), band)))
}

// axes writes the grid with the y ticks, the window numbers (about 12 at
// most), the axes and their titles.
func (c *chart) axes() {
	for v := 0.0; v <= c.yMax+c.step/2; v += c.step {
		fmt.Fprintf(&c.b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="%s" stroke-width="1"/>`+"\n", plotL, c.y(v), plotR, c.y(v), gridColor)
		fmt.Fprintf(&c.b, `<text x="%g" y="%.1f" font-size="12" text-anchor="end">%s</text>`+"\n", plotL-8, c.y(v)+4, fmtNum(v))
	}
	every := 1
	for c.n/every > 12 {
		every = int(niceStep(float64(every) + 1))
	}
	for i := range c.n {
		if (i+1)%every == 0 || every == 1 {
			fmt.Fprintf(&c.b, `<text x="%.1f" y="%g" font-size="12" text-anchor="middle">%d</text>`+"\n", c.x(i), plotB+18, i+1)
		}
	}
	fmt.Fprintf(&c.b, `<polyline points="%g,%g %g,%g %g,%g" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", plotL, plotT, plotL, plotB, plotR, plotB, axisColor)
	fmt.Fprintf(&c.b, `<text x="%g" y="%g" font-size="13" text-anchor="middle">%s</text>`+"\n", (plotL+plotR)/2, plotB+42, esc("window ("+c.r.Window+" each)"))
	fmt.Fprintf(&c.b, `<text x="20" y="%g" font-size="13" text-anchor="middle" transform="rotate(-90 20 %g)">admitted per identifier per window</text>`+"\n", (plotT+plotB)/2, (plotT+plotB)/2)
}

// faults writes the run's faults over the plot, each labelled: an outage
// shaded over its span, a restart or loss without an end as a vertical line.
func (c *chart) faults() {
	xt := func(ms int64) float64 {
		return plotL + float64(ms)/float64(windowMs(c.r))*(plotR-plotL)/float64(c.n)
	}
	for i, f := range c.r.Faults {
		x0 := xt(f.AtMs)
		if f.UntilMs > 0 {
			fmt.Fprintf(&c.b, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="#f2c94c" fill-opacity="0.25"/>`+"\n", x0, plotT, xt(f.UntilMs)-x0, plotB-plotT)
		} else {
			fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#b8860b" stroke-width="2" stroke-dasharray="2 3"/>`+"\n", x0, plotT, x0, plotB)
		}
		fmt.Fprintf(&c.b, `<text x="%.1f" y="%g" font-size="11" fill="#8a6d00">%s</text>`+"\n", x0+4, plotT+14+float64(i)*14, esc(f.What))
	}
}

// plot writes the limit, then the lines: the total first and widest, the
// model dashed over it (where they agree, the dashes show on the total),
// then each node or region thin, on top (one region taking all traffic
// shows on the total).
func (c *chart) plot() {
	limit := c.y(float64(c.r.Limit))
	fmt.Fprintf(&c.b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="%s" stroke-width="%g" stroke-dasharray="8 5"/>`+"\n", plotL, limit, plotR, limit, colorLimit, limitStroke)
	c.line(c.total, colorTotal, thickStroke, "")
	c.line(c.means(c.r.ReferenceSeries), colorModel, modelStroke, "4 4")
	for i, s := range c.r.Series {
		c.line(c.means(s.Admitted), palette[i%len(palette)], thinStroke, "")
	}
}

// line writes one value per window as a polyline, dashed as dash says if
// it is not empty, with a marker on each value unless there are too many
// windows (over 24).
func (c *chart) line(vals []float64, color string, width float64, dash string) {
	var pts []string
	for i, v := range vals {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", c.x(i), c.y(v)))
	}
	fmt.Fprintf(&c.b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%g"%s/>`+"\n", strings.Join(pts, " "), color, width, dashArray(dash))
	if c.n > 24 {
		return
	}
	for i, v := range vals {
		fmt.Fprintf(&c.b, `<circle cx="%.1f" cy="%.1f" r="%g" fill="%s"/>`+"\n", c.x(i), c.y(v), markerRadius, color)
	}
}

// legend writes the legend beside the plot: the limit, the total, the
// model, then each node or region, in the colours and strokes of plot.
func (c *chart) legend() {
	who := "nodes"
	if c.r.Regions > 1 {
		who = "regions"
	}
	ly := plotT + 6
	entry := func(color string, width float64, dash, label string) {
		fmt.Fprintf(&c.b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="%g"%s/>`+"\n", legendX, ly, legendX+28, ly, color, width, dashArray(dash))
		fmt.Fprintf(&c.b, `<text x="%g" y="%g" font-size="12">%s</text>`+"\n", legendX+36, ly+4, esc(label))
		ly += 20
	}
	entry(colorLimit, limitStroke, "8 5", fmt.Sprintf("limit (%d)", c.r.Limit))
	entry(colorTotal, thickStroke, "", "admitted, all "+who)
	entry(colorModel, modelStroke, "4 4", "exact model")
	for i, s := range c.r.Series {
		entry(palette[i%len(palette)], thinStroke, "", "admitted by "+s.Name)
	}
}

// dashArray returns the stroke-dasharray attribute of dash, with its
// leading space, or nothing for a solid line.
func dashArray(dash string) string {
	if dash == "" {
		return ""
	}
	return fmt.Sprintf(` stroke-dasharray="%s"`, dash)
}

// windowMs returns the window of r in milliseconds.
func windowMs(r Result) int64 {
	d, err := time.ParseDuration(r.Window)
	if err != nil || d <= 0 {
		return 1
	}
	return d.Milliseconds()
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow10(int(math.Floor(math.Log10(raw))))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}
