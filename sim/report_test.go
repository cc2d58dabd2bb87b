package sim

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func runReport(t *testing.T, seed uint64, names ...string) Report {
	t.Helper()
	rep := Report{Seed: seed}
	for _, name := range names {
		s, ok := Find(name)
		if !ok {
			t.Fatalf("no scenario %s", name)
		}
		res, err := Run(s, seed)
		if err != nil {
			t.Fatal(err)
		}
		rep.Results = append(rep.Results, res)
	}
	return rep
}

// TestWriteFilesIsByteIdentical runs the same scenarios twice with one seed
// and checks that every output file is byte for byte the same, that the
// charts parse as XML and that results.json reads back.
func TestWriteFilesIsByteIdentical(t *testing.T) {
	t.Parallel() // one core of simulation: the package's long runs share both
	names := []string{"region-2x", "spread-3-regions"}
	dirs := []string{t.TempDir(), t.TempDir()}
	for _, dir := range dirs {
		if err := runReport(t, 3, names...).WriteFiles(dir); err != nil {
			t.Fatal(err)
		}
	}
	files := []string{"report.md", "results.json", "region-2x.svg", "spread-3-regions.svg"}
	for _, f := range files {
		a, err := os.ReadFile(filepath.Join(dirs[0], f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dirs[1], f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs with one seed", f)
		}
		if strings.HasSuffix(f, ".svg") {
			checkSVG(t, f, a)
		}
	}
	var back Report
	data, _ := os.ReadFile(filepath.Join(dirs[0], "results.json"))
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if back.Seed != 3 || len(back.Results) != 2 || back.Results[1].Scenario != "spread-3-regions" || back.Results[0].Admitted == 0 {
		t.Errorf("results.json reads back as %+v", back)
	}
	md, _ := os.ReadFile(filepath.Join(dirs[0], "report.md"))
	for _, want := range []string{"| region-2x | 1 region × 3 nodes | 2× |", "## spread-3-regions", "![spread-3-regions: admitted per window against the limit](spread-3-regions.svg)"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}

// checkSVG parses a chart as XML and checks that it draws what its legend
// says: the limit, the total, the model and one line per series.
func checkSVG(t *testing.T, name string, data []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	polylines, texts := 0, []string{}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s does not parse as XML: %v", name, err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if el.Name.Local == "polyline" {
				polylines++
			}
		case xml.CharData:
			texts = append(texts, string(el))
		}
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"limit (100)", "exact model", "admitted, all", "window (", "admitted per identifier per window"} {
		if !strings.Contains(all, want) {
			t.Errorf("%s: no text %q", name, want)
		}
	}
	// The axes, the model, the total and one per node or region.
	series := strings.Count(all, "admitted by ")
	if series < 1 || polylines != 3+series {
		t.Errorf("%s: %d polylines for %d series", name, polylines, series)
	}
}

func TestReportFailed(t *testing.T) {
	r := Report{Results: []Result{{Scenario: "a", InBand: true}, {Scenario: "b"}, {Scenario: "c", InBand: true}}}
	if got := r.Failed(); !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("Failed() = %v", got)
	}
}

func TestNiceStep(t *testing.T) {
	for raw, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.2: 2, 23: 50, 24.1: 50, 7: 10, 110: 200} {
		if got := niceStep(raw); got != want {
			t.Errorf("niceStep(%v) = %v, want %v", raw, got, want)
		}
	}
}

// TestAccuracyDocMatchesReport checks that the summary table of
// docs/accuracy.md is the one of the committed docs/accuracy/report.md, so
// that a regenerated report is not left with a stale page beside it.
func TestAccuracyDocMatchesReport(t *testing.T) {
	table := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var rows []string
		in := false
		for line := range strings.Lines(string(data)) {
			switch {
			case strings.HasPrefix(line, "| scenario |"):
				in = true
			case in && !strings.HasPrefix(line, "|"):
				return strings.Join(rows, "")
			}
			if in {
				rows = append(rows, line)
			}
		}
		return strings.Join(rows, "")
	}
	doc, rep := table(filepath.Join("..", "docs", "accuracy.md")), table(filepath.Join("..", "docs", "accuracy", "report.md"))
	if doc == "" || doc != rep {
		t.Errorf("the summary of docs/accuracy.md differs from docs/accuracy/report.md (make accuracy, then copy the table):\n%s\n%s", doc, rep)
	}
	if n := strings.Count(rep, "\n") - 2; n != len(Builtin()) {
		t.Errorf("the committed report has %d scenarios, there are %d built in", n, len(Builtin()))
	}
	for _, s := range Builtin() { // every committed chart parses and draws its legend
		data, err := os.ReadFile(filepath.Join("..", "docs", "accuracy", s.Name+".svg"))
		if err != nil {
			t.Error(err)
			continue
		}
		checkSVG(t, s.Name+".svg", data)
	}
}
