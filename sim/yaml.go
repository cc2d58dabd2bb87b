package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// LoadFile reads one scenario from a YAML file (schema:
// docs/simulator.md). Every error names the file, and, for an error
// about a field, its line and name.
func LoadFile(path string) (Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, fmt.Errorf("sim: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes one scenario from the YAML document data, read from file
// (used in errors), and validates it. Decoding is strict: an unknown or
// repeated field, a value of the wrong type, a missing required field or a
// second document is an error naming the file, the line and the field.
func Parse(file string, data []byte) (Scenario, error) {
	// The document is decoded to a node tree and walked field by field
	// (rather than decoded into a struct with KnownFields): that way every
	// error, a validation error too, can name its field and line.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Scenario{}, fmt.Errorf("sim: %s: empty scenario file", file)
		}
		return Scenario{}, fmt.Errorf("sim: %s: %w", file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Scenario{}, fmt.Errorf("sim: %s:%d: one scenario per file: a second document follows", file, extra.Line)
	}
	p := &parser{file: file, lines: map[string]int{}}
	s, err := p.scenario(doc.Content[0])
	if err != nil {
		return Scenario{}, err
	}
	if err := s.Validate(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.File, fe.Line = file, p.line(fe.Field)
		}
		return Scenario{}, err
	}
	return s, nil
}

// parser decodes the nodes of one file, remembering the line of every field
// so that a validation error can point at it.
type parser struct {
	file  string
	lines map[string]int // field path → line
}

// line returns the line of field path, or of its closest recorded parent.
func (p *parser) line(path string) int {
	for path != "" {
		if l, ok := p.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

func (p *parser) fail(n *yaml.Node, field, format string, args ...any) error {
	return &FieldError{File: p.file, Line: n.Line, Field: field, Err: fmt.Errorf(format, args...)}
}

// fields walks the mapping n: it calls set with each key's name, path and
// value, rejects keys not in known and repeated keys, and reports required
// keys that are missing.
func (p *parser) fields(n *yaml.Node, prefix string, known, required []string, set func(name, path string, v *yaml.Node) error) error {
	where := strings.TrimSuffix(prefix, ".")
	if n.Kind != yaml.MappingNode {
		if where == "" {
			where = "(document)"
		}
		return p.fail(n, where, "want a mapping of fields, got %s", describe(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := prefix + k.Value
		switch {
		case !slices.Contains(known, k.Value):
			return p.fail(k, path, "unknown field (known: %s)", strings.Join(known, ", "))
		case seen[k.Value]:
			return p.fail(k, path, "repeated (first at line %d)", p.lines[path])
		}
		seen[k.Value] = true
		p.lines[path] = k.Line
		if err := set(k.Value, path, v); err != nil {
			return err
		}
	}
	for _, r := range required {
		if !seen[r] {
			if where == "" {
				return &FieldError{File: p.file, Line: n.Line, Field: r, Err: errors.New("required, missing")}
			}
			return &FieldError{File: p.file, Line: n.Line, Field: prefix + r, Err: errors.New("required, missing")}
		}
	}
	return nil
}

var (
	scenarioFields = []string{"name", "description", "regions", "nodes", "limit", "window", "windows", "load",
		"identifiers", "skew", "traffic", "balance", "origin", "failure_detection", "replay_interval", "global_interval", "origin_margin",
		"replay_latency", "replay_jitter", "origin_loss", "global_loss", "global_latency",
		"faults", "band"}
	scenarioRequired = []string{"name", "nodes", "limit", "window", "windows", "load", "band"}
	faultFields      = []string{"kind", "at", "until", "regions", "node"}
	bandFields       = []string{"min_over_pct", "max_over_pct"}
)

func (p *parser) scenario(n *yaml.Node) (Scenario, error) {
	s := Scenario{Regions: 1, Identifiers: 1}
	err := p.fields(n, "", scenarioFields, scenarioRequired, func(name, path string, v *yaml.Node) error {
		var err error
		switch name {
		case "name":
			s.Name, err = p.str(v, path)
		case "description":
			s.Description, err = p.str(v, path)
		case "regions":
			s.Regions, err = p.integer(v, path)
		case "nodes":
			s.Nodes, err = p.integer(v, path)
		case "limit":
			var l int
			l, err = p.integer(v, path)
			s.Limit = int64(l)
		case "window":
			s.Window, err = p.duration(v, path)
		case "windows":
			s.Windows, err = p.integer(v, path)
		case "load":
			s.Load, err = p.number(v, path)
		case "identifiers":
			s.Identifiers, err = p.integer(v, path)
		case "skew":
			s.Skew, err = p.number(v, path)
		case "traffic":
			s.Traffic, err = named[Traffic](p, v, path)
		case "balance":
			s.Balance, err = named[Balance](p, v, path)
		case "origin":
			s.Origin, err = named[OriginKind](p, v, path)
		case "failure_detection":
			s.FailureDetection, err = p.duration(v, path)
		case "replay_interval":
			s.ReplayInterval, err = p.duration(v, path)
		case "global_interval":
			s.GlobalInterval, err = p.duration(v, path)
		case "origin_margin":
			s.OriginMargin, err = p.number(v, path)
		case "replay_latency":
			s.ReplayLatency, err = p.duration(v, path)
		case "replay_jitter":
			s.ReplayJitter, err = p.duration(v, path)
		case "origin_loss":
			s.OriginLoss, err = p.number(v, path)
		case "global_loss":
			s.GlobalLoss, err = p.number(v, path)
		case "global_latency":
			s.GlobalLatency, err = p.duration(v, path)
		case "faults":
			s.Faults, err = p.faults(v, path)
		case "band":
			s.Band, err = p.band(v, path)
		}
		return err
	})
	return s, err
}

func (p *parser) faults(n *yaml.Node, path string) ([]Fault, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.fail(n, path, "want a list of faults, got %s", describe(n))
	}
	faults := make([]Fault, 0, len(n.Content))
	for i, item := range n.Content {
		prefix := fmt.Sprintf("%s[%d].", path, i)
		p.lines[strings.TrimSuffix(prefix, ".")] = item.Line
		var f Fault
		err := p.fields(item, prefix, faultFields, []string{"kind", "at"}, func(name, path string, v *yaml.Node) error {
			var err error
			switch name {
			case "kind":
				f.Kind, err = named[FaultKind](p, v, path)
			case "at":
				f.At, err = p.duration(v, path)
			case "until":
				f.Until, err = p.duration(v, path)
			case "node":
				f.Node, err = p.integer(v, path)
			case "regions":
				if v.Kind != yaml.SequenceNode {
					return p.fail(v, path, "want a list of region indexes, got %s", describe(v))
				}
				for j, r := range v.Content {
					rp := fmt.Sprintf("%s[%d]", path, j)
					p.lines[rp] = r.Line
					idx, err := p.integer(r, rp)
					if err != nil {
						return err
					}
					f.Regions = append(f.Regions, idx)
				}
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		faults = append(faults, f)
	}
	return faults, nil
}

func (p *parser) band(n *yaml.Node, path string) (Band, error) {
	var b Band
	err := p.fields(n, path+".", bandFields, bandFields, func(name, path string, v *yaml.Node) error {
		x, err := p.number(v, path)
		if name == "min_over_pct" {
			b.MinOverPct = x
		} else {
			b.MaxOverPct = x
		}
		return err
	})
	return b, err
}

func (p *parser) str(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return "", p.fail(n, path, "want a string, got %s", describe(n))
	}
	return n.Value, nil
}

// named decodes a string into one of the scenario's named string types;
// Validate checks the value.
func named[T ~string](p *parser, n *yaml.Node, path string) (T, error) {
	v, err := p.str(n, path)
	return T(v), err
}

func (p *parser) integer(n *yaml.Node, path string) (int, error) {
	var v int
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		return 0, p.fail(n, path, "want an integer, got %s", describe(n))
	}
	return v, nil
}

func (p *parser) number(n *yaml.Node, path string) (float64, error) {
	var v float64
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&v) != nil ||
		math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, p.fail(n, path, "want a number, got %s", describe(n))
	}
	return v, nil
}

func (p *parser) duration(n *yaml.Node, path string) (time.Duration, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		if d, err := time.ParseDuration(n.Value); err == nil {
			return d, nil
		}
	}
	return 0, p.fail(n, path, "want a duration such as 10s, 25ms or 1m30s, got %s", describe(n))
}

// describe names what a node holds, for errors.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	default:
		return "something else"
	}
}
