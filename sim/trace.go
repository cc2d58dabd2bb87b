package sim

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TraceRequest is one request of a user's traffic log.
type TraceRequest struct {
	// Time is the request's instant in Unix milliseconds.
	Time int64
	// Namespace defaults to "default"; Identifier is required.
	Namespace  string
	Identifier string
	// Cost defaults to 1; 0 peeks.
	Cost int64
	// Region and Node place the request: the region's index, and the node's
	// index within its region. -1 (the column absent or empty) means at
	// random.
	Region, Node int
	// Line is the request's line in its file, for errors.
	Line int
}

// Trace is a user's traffic log, in ascending time.
type Trace struct {
	File     string
	Requests []TraceRequest
}

// TraceColumns are the columns (CSV) or members (JSON lines) of a trace:
// time and identifier are required.
var TraceColumns = []string{"time", "identifier", "namespace", "cost", "node", "region"}

// LoadTrace reads a trace file: JSON lines when its name ends in .jsonl,
// .ndjson or .json or its first character is '{', CSV with a header row
// otherwise. Every error names the file, and, for a malformed request, its
// line and field.
func LoadTrace(path string) (Trace, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Trace{}, fmt.Errorf("sim: %w", err)
	}
	return ParseTrace(path, data)
}

// ParseTrace decodes a trace read from file (used in errors); see
// [LoadTrace]. Requests are sorted by time (stably) if they are not already.
func ParseTrace(file string, data []byte) (Trace, error) {
	var (
		reqs []TraceRequest
		err  error
	)
	ext := strings.ToLower(filepath.Ext(file))
	if ext == ".jsonl" || ext == ".ndjson" || ext == ".json" || bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n\ufeff"), []byte("{")) {
		reqs, err = parseJSONLines(file, data)
	} else {
		reqs, err = parseCSV(file, data)
	}
	if err != nil {
		return Trace{}, err
	}
	if len(reqs) == 0 {
		return Trace{}, fmt.Errorf("sim: %s: the trace holds no request", file)
	}
	slices.SortStableFunc(reqs, func(a, b TraceRequest) int { return cmp.Compare(a.Time, b.Time) })
	return Trace{File: file, Requests: reqs}, nil
}

func traceErr(file string, line int, field, format string, args ...any) error {
	return &FieldError{File: file, Line: line, Field: field, Err: fmt.Errorf(format, args...)}
}

// setField parses one value of column name into r.
func setField(file string, line int, r *TraceRequest, name, v string) error {
	switch name {
	case "time":
		ms, err := parseTime(v)
		if err != nil {
			return traceErr(file, line, name, "%v", err)
		}
		r.Time = ms
	case "identifier":
		if v == "" {
			return traceErr(file, line, name, "empty")
		}
		r.Identifier = v
	case "namespace":
		if v != "" {
			r.Namespace = v
		}
	case "cost":
		if v == "" {
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return traceErr(file, line, name, "want a non-negative integer, got %q", v)
		}
		r.Cost = n
	case "node", "region":
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return traceErr(file, line, name, "want an index from 0, got %q", v)
		}
		if name == "node" {
			r.Node = n
		} else {
			r.Region = n
		}
	}
	return nil
}

// parseTime reads Unix milliseconds or an RFC 3339 time.
func parseTime(v string) (int64, error) {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		if ms < 0 {
			return 0, fmt.Errorf("%d is before the Unix epoch", ms)
		}
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, fmt.Errorf("want Unix milliseconds or an RFC 3339 time, got %q", v)
	}
	if t.UnixMilli() < 0 {
		return 0, fmt.Errorf("%q is before the Unix epoch", v)
	}
	return t.UnixMilli(), nil
}

func newTraceRequest(line int) TraceRequest {
	return TraceRequest{Namespace: "default", Cost: 1, Region: -1, Node: -1, Line: line}
}

func parseCSV(file string, data []byte) ([]TraceRequest, error) {
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(data, []byte("\ufeff"))))
	r.FieldsPerRecord = 0 // every row has the header's number of fields
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("sim: %s: empty trace (a CSV header row is required)", file)
	}
	if err != nil {
		return nil, fmt.Errorf("sim: %s: %w", file, err)
	}
	seen := map[string]bool{}
	for i, h := range header {
		h = strings.TrimSpace(h)
		header[i] = h
		switch {
		case !slices.Contains(TraceColumns, h):
			return nil, traceErr(file, 1, h, "unknown column (known: %s)", strings.Join(TraceColumns, ", "))
		case seen[h]:
			return nil, traceErr(file, 1, h, "repeated column")
		}
		seen[h] = true
	}
	for _, req := range []string{"time", "identifier"} {
		if !seen[req] {
			return nil, traceErr(file, 1, req, "required column missing from the header")
		}
	}
	var out []TraceRequest
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("sim: %s:%d: %w", file, pe.Line, pe.Err)
			}
			return nil, fmt.Errorf("sim: %s: %w", file, err)
		}
		line, _ := r.FieldPos(0)
		req := newTraceRequest(line)
		for i, v := range rec {
			if err := setField(file, line, &req, header[i], strings.TrimSpace(v)); err != nil {
				return nil, err
			}
		}
		out = append(out, req)
	}
}

func parseJSONLines(file string, data []byte) ([]TraceRequest, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var out []TraceRequest
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if line == 1 {
			text = bytes.TrimPrefix(text, []byte("\ufeff"))
		}
		if len(text) == 0 {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(text, &m); err != nil {
			return nil, fmt.Errorf("sim: %s:%d: want a JSON object: %w", file, line, err)
		}
		req := newTraceRequest(line)
		for _, name := range TraceColumns { // a fixed order: the first error is always the same
			raw, ok := m[name]
			if !ok {
				if name == "time" || name == "identifier" {
					return nil, traceErr(file, line, name, "required, missing")
				}
				continue
			}
			v, err := jsonScalar(raw, name)
			if err != nil {
				return nil, traceErr(file, line, name, "%v", err)
			}
			if err := setField(file, line, &req, name, v); err != nil {
				return nil, err
			}
		}
		for name := range m {
			if !slices.Contains(TraceColumns, name) {
				return nil, traceErr(file, line, name, "unknown member (known: %s)", strings.Join(TraceColumns, ", "))
			}
		}
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sim: %s: %w", file, err)
	}
	return out, nil
}

// jsonScalar returns the text of a JSON string, or of a JSON integer for
// the members that may be numbers.
func jsonScalar(raw json.RawMessage, name string) (string, error) {
	if string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if name == "cost" || name == "node" || name == "region" {
			return "", fmt.Errorf("want a number, got %s", raw)
		}
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil && name != "identifier" && name != "namespace" {
		return n.String(), nil
	}
	return "", fmt.Errorf("want a %s, got %s", map[bool]string{true: "string", false: "number"}[name == "identifier" || name == "namespace"], raw)
}

// The most windows, and identifier-windows, a trace may span: the
// simulator tallies every identifier's admissions per window.
const (
	maxTraceWindows = 100_000
	maxTraceCells   = 20_000_000
)

// TraceDeployment is the deployment a trace is replayed through.
type TraceDeployment struct {
	// Name names the result (and its chart); lower-case letters, digits,
	// dashes.
	Name           string
	Regions, Nodes int
	// Limit and Window apply to every identifier of the trace.
	Limit  int64
	Window time.Duration
	// Origin, ReplayInterval, GlobalInterval and OriginMargin as in a
	// [Scenario].
	Origin         OriginKind
	ReplayInterval time.Duration
	GlobalInterval time.Duration
	OriginMargin   float64
}

// RunTrace replays tr through the deployment dep, in virtual time, and
// compares what it admits with what the exact single-node model admits of
// the same requests. Requests without a region or node go to one picked by
// the random source seeded with seed. The result has no band.
func RunTrace(tr Trace, dep TraceDeployment, seed uint64) (Result, error) {
	if len(tr.Requests) == 0 {
		return Result{}, fmt.Errorf("sim: %s: the trace holds no request", tr.File)
	}
	d := dep.Window.Milliseconds()
	s := Scenario{
		Name: dep.Name, Regions: dep.Regions, Nodes: dep.Nodes, Limit: dep.Limit, Window: dep.Window,
		ReplayInterval: dep.ReplayInterval, GlobalInterval: dep.GlobalInterval, OriginMargin: dep.OriginMargin,
		Origin: dep.Origin, Windows: 1, Load: 1, Identifiers: 1,
	}
	if d > 0 {
		first, last := tr.Requests[0].Time, tr.Requests[len(tr.Requests)-1].Time
		s.Windows = int((last-first/d*d)/d + 1)
	}
	index := map[identity]int{}
	var ids []identity
	var cost int64
	for _, r := range tr.Requests {
		k := identity{namespace: r.Namespace, identifier: r.Identifier}
		if _, ok := index[k]; !ok {
			index[k] = len(ids)
			ids = append(ids, k)
		}
		cost += r.Cost
	}
	s.Identifiers = len(ids)
	if s.Limit > 0 && s.Windows > 0 {
		s.Load = max(round(float64(cost)/float64(s.Limit*int64(s.Windows)*int64(len(ids))), 4), 0.0001)
	}
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	if s.Windows > maxTraceWindows || int64(s.Windows)*int64(len(ids)) > maxTraceCells {
		return Result{}, fmt.Errorf("sim: %s: %d identifiers over %d windows of %s are more than the simulator tallies (%d windows, %d identifier-windows); use a longer window or a shorter trace",
			tr.File, len(ids), s.Windows, fmtDuration(s.Window), maxTraceWindows, maxTraceCells)
	}
	s = s.withDefaults()
	mode := ""
	if s.Origin == OriginCluster {
		mode = " in cluster mode"
	}
	s.Description = fmt.Sprintf("The trace %s (%d requests, %d identifiers) replayed through %d %s of %d %s%s, limit %d per %s.",
		filepath.Base(tr.File), len(tr.Requests), len(ids), s.Regions, plural(s.Regions, "region", "regions"),
		s.Nodes, plural(s.Nodes, "node", "nodes"), mode, s.Limit, fmtDuration(s.Window))
	for _, r := range tr.Requests {
		switch {
		case r.Region >= s.Regions:
			return Result{}, traceErr(tr.File, r.Line, "region", "%d is not a region of %d", r.Region, s.Regions)
		case r.Node >= s.Nodes:
			return Result{}, traceErr(tr.File, r.Line, "node", "%d is not a node of %d in a region", r.Node, s.Nodes)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x7ace))
	i := 0
	next := func() (event, bool, error) {
		if i == len(tr.Requests) {
			return event{}, false, nil
		}
		r := tr.Requests[i]
		i++
		region, node := r.Region, r.Node
		if region < 0 {
			region = rng.IntN(s.Regions)
		}
		if node < 0 {
			node = rng.IntN(s.Nodes)
		}
		return event{ms: r.Time, id: index[identity{r.Namespace, r.Identifier}], cost: r.Cost, node: region*s.Nodes + node}, true, nil
	}
	start := tr.Requests[0].Time / d * d
	res, err := simulate(s, seed, start, ids, next)
	if err != nil {
		return Result{}, err
	}
	res.Traffic = "trace"
	return res, nil
}
