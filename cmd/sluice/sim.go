package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/sim"
)

// simGCPercent is the garbage collector's target that `sluice sim` uses
// when the environment does not set GOGC. A run's heap is mostly state that
// lives to its end (every node's cells, the stores' rows), so Go's default
// (100) lets the process grow to about twice what it holds, and the
// simulation runs on one goroutine, leaving the collector the other cores:
// scale-1m at full size took 14.2 GB and 7 min 35 s at 100, 11.8 GB and
// 7 min 50 s at 50, on two cores. GOGC=100 restores Go's default.
const simGCPercent = 50

// simCmd is `sluice sim`: it runs scenarios through the real engine in
// virtual time and reports how far the distributed deployment strays from
// the exact single-node model (docs/simulator.md).
type simCmd struct {
	Scenarios []string `arg:"" optional:"" name:"scenario" help:"Built-in scenario names (see --list) or YAML scenario files."`
	List      bool     `help:"List the built-in scenarios and exit."`
	All       bool     `help:"Run every built-in scenario (before any named ones)."`
	Scale     bool     `help:"Run the scale study (docs/capacity.md): from one base point, identities, nodes, regions and load each varied; prints its tables (with --out, also writes scale.md and results.json there)."`
	Seed      uint64   `default:"1" help:"Seed of the random source: one seed gives the same figures and files, byte for byte."`
	Out       string   `type:"path" placeholder:"DIR" help:"Write report.md, NAME.svg per scenario and results.json into DIR."`
	JSON      bool     `name:"json" help:"Print results.json to standard output instead of the summary."`

	Trace          string        `placeholder:"FILE" help:"Replay a request log (CSV with a header row, or JSON lines; docs/simulator.md) through --regions × --nodes at --limit per --duration, against the exact model."`
	Regions        int           `default:"1" help:"With --trace: the number of regions."`
	Nodes          int           `default:"3" help:"With --trace: the nodes of each region."`
	Origin         string        `default:"shared" enum:"shared,cluster" help:"With --trace: how the nodes of a region converge: shared (one store per region, as Redis) or cluster (cluster mode, no shared store)."`
	Limit          int64         `placeholder:"N" help:"With --trace: every identifier's limit per window (required)."`
	Duration       time.Duration `help:"With --trace: the window, e.g. 1m (required)."`
	ReplayInterval time.Duration `default:"25ms" help:"With --trace: the replay interval of every node."`
	GlobalInterval time.Duration `default:"5s" help:"With --trace and several regions: the global layer's interval."`
	OriginMargin   float64       `default:"0.2" help:"With --trace: Config.OriginMargin of every node (negative turns it off)."`
}

// Help is kong's long help of the command.
func (simCmd) Help() string {
	return `Every simulated node is a real limiter; the regions' origins (Redis, or cluster mode's peer network) and the global store (MySQL) are in-process stand-ins behind the same interfaces, and time is virtual, so a run is deterministic for a seed. A scenario of the accuracy report (--all) takes well under a second; scale-1m, a whole deployment at full size run for its costs (docs/capacity.md), about 8 minutes and 12 GB on two cores. A scenario that leaves its band of over-admission makes the command exit with status 1, after writing its output.

  sluice sim --list
  sluice sim region-10x spread-8-regions
  sluice sim scale-1m --out capacity
  sluice sim --all --out docs/accuracy
  sluice sim my-scenario.yaml --seed 7 --json
  sluice sim --trace access.csv --regions 2 --nodes 3 --limit 100 --duration 1m
  sluice sim --trace access.csv --origin cluster --nodes 5 --limit 100 --duration 1m

The YAML schema of scenario files and every figure are described in docs/simulator.md.`
}

// Run runs the chosen scenarios and writes the summary (or results.json)
// to out.
func (c *simCmd) Run(out io.Writer) error {
	if c.List {
		return listScenarios(out)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(simGCPercent)
	}
	if c.Scale {
		return c.runScale(out)
	}
	scenarios, err := c.scenarios()
	if err != nil {
		return err
	}
	var trace sim.Trace
	if c.Trace != "" {
		if trace, err = sim.LoadTrace(c.Trace); err != nil {
			return err
		}
	}
	start := time.Now()
	rep := sim.Report{Seed: c.Seed}
	bar := progress{total: len(scenarios)}
	if c.Trace != "" {
		bar.total++
	}
	if isTerminal(os.Stderr) {
		bar.w = os.Stderr
	}
	defer bar.done()
	for _, s := range scenarios {
		bar.step(s.Name)
		res, err := sim.Run(s, c.Seed)
		if err != nil {
			return err
		}
		rep.Results = append(rep.Results, res)
	}
	if c.Trace != "" {
		bar.step(c.deployment().Name)
		res, err := sim.RunTrace(trace, c.deployment(), c.Seed)
		if err != nil {
			return err
		}
		rep.Results = append(rep.Results, res)
	}
	bar.done()
	elapsed := time.Since(start)
	if c.Out != "" {
		if err := rep.WriteFiles(c.Out); err != nil {
			return err
		}
	}
	if c.JSON {
		err = rep.WriteJSON(out)
	} else {
		err = rep.WriteSummary(out)
		if err == nil {
			_, err = fmt.Fprintf(out, "\n%d %s, seed %d, in %.1fs%s\n", len(rep.Results),
				map[bool]string{true: "scenario", false: "scenarios"}[len(rep.Results) == 1], c.Seed, elapsed.Seconds(), written(c.Out))
		}
	}
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if failed := rep.Failed(); len(failed) > 0 {
		return fmt.Errorf("sim: out of their band: %s", strings.Join(failed, ", "))
	}
	return nil
}

// runScale runs the scale study and writes its tables to out, and with
// --out, scale.md and results.json into that folder.
func (c *simCmd) runScale(out io.Writer) error {
	if c.All || len(c.Scenarios) > 0 || c.Trace != "" {
		return errors.New("sim: --scale runs the scale study alone: name no scenario, and leave out --all and --trace")
	}
	series := sim.ScaleStudy()
	results := make([][]sim.Result, len(series))
	rep := sim.Report{Seed: c.Seed}
	for i, sr := range series {
		for _, s := range sr.Scenarios {
			res, err := sim.Run(s, c.Seed)
			if err != nil {
				return err
			}
			results[i] = append(results[i], res)
			rep.Results = append(rep.Results, res)
		}
	}
	var tables bytes.Buffer
	if err := sim.WriteScale(&tables, series, results); err != nil {
		return err
	}
	if c.Out != "" {
		if err := os.MkdirAll(c.Out, 0o755); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		var js bytes.Buffer
		if err := rep.WriteJSON(&js); err != nil {
			return err
		}
		for name, b := range map[string][]byte{"scale.md": tables.Bytes(), "results.json": js.Bytes()} {
			if err := os.WriteFile(filepath.Join(c.Out, name), b, 0o644); err != nil {
				return fmt.Errorf("sim: %w", err)
			}
		}
	}
	if _, err := out.Write(tables.Bytes()); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

func written(dir string) string {
	if dir == "" {
		return ""
	}
	return "; written to " + dir
}

// scenarios resolves --all and the arguments: a name of a built-in
// scenario, or a YAML file (an existing path, or a name ending in .yaml or
// .yml).
func (c *simCmd) scenarios() ([]sim.Scenario, error) {
	if c.Trace == "" && (c.Limit != 0 || c.Duration != 0) {
		return nil, errors.New("sim: --limit and --duration go with --trace")
	}
	if c.Trace != "" && (c.Limit <= 0 || c.Duration <= 0) {
		return nil, errors.New("sim: --trace needs --limit and --duration (the limit of every identifier per window)")
	}
	var out []sim.Scenario
	if c.All {
		out = sim.Builtin()
	}
	for _, arg := range c.Scenarios {
		if s, ok := sim.Find(arg); ok && !isFile(arg) {
			out = append(out, s)
			continue
		}
		if !isFile(arg) && !strings.HasSuffix(arg, ".yaml") && !strings.HasSuffix(arg, ".yml") {
			return nil, fmt.Errorf("sim: no built-in scenario or file %q (sluice sim --list names them)", arg)
		}
		s, err := sim.LoadFile(arg)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 && c.Trace == "" {
		return nil, errors.New("sim: name scenarios or YAML files, or pass --all, --trace or --list")
	}
	seen := map[string]bool{c.deployment().Name: c.Trace != ""}
	for _, s := range out {
		if seen[s.Name] {
			return nil, fmt.Errorf("sim: scenario %s is named twice (its chart would be written twice)", s.Name)
		}
		seen[s.Name] = true
	}
	return out, nil
}

// deployment is the topology a --trace is replayed through; its name is
// "trace-" and the file's base name.
func (c *simCmd) deployment() sim.TraceDeployment {
	base := strings.TrimSuffix(filepath.Base(c.Trace), filepath.Ext(c.Trace))
	name := strings.Trim(strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, base), "-")
	return sim.TraceDeployment{
		Name: "trace-" + name, Regions: c.Regions, Nodes: c.Nodes, Limit: c.Limit, Window: c.Duration,
		ReplayInterval: c.ReplayInterval, GlobalInterval: c.GlobalInterval, OriginMargin: c.OriginMargin,
		Origin: sim.OriginKind(c.Origin),
	}
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// listScenarios writes the built-in scenarios, their band and description:
// those of --all, then the deployments run for their costs.
func listScenarios(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tBAND (OVER-ADMISSION)\tDESCRIPTION")
	for _, s := range sim.Builtin() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.Band, s.Description)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "DEPLOYMENT (NOT IN --all)\tBAND (OVER-ADMISSION)\tDESCRIPTION")
	for _, s := range sim.Deployments() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.Band, s.Description)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// progress draws a one-line progress bar, rewritten in place, on a
// terminal; with no writer it draws nothing.
type progress struct {
	w            io.Writer // nil: not a terminal
	total, count int
	drawn        bool
}

// step shows that the scenario name starts.
func (p *progress) step(name string) {
	p.count++
	if p.w == nil {
		return
	}
	const width = 20
	filled := width * (p.count - 1) / max(p.total, 1)
	fmt.Fprintf(p.w, "\r\x1b[Ksim [%s%s] %d/%d %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled), p.count, p.total, name)
	p.drawn = true
}

// done erases the bar.
func (p *progress) done() {
	if p.w != nil && p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}

// isTerminal reports whether f is a character device other than the null
// device: a terminal, for the progress bar.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}
