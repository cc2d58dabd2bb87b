package main

import (
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/server/rls"
)

// rlsIndex is where things are in one Envoy RLS file: the lines of its
// domain and of its descriptors, by the path that the loader's messages
// name them with ("key=value > key2").
type rlsIndex struct {
	domain     string
	domainLine int
	lines      map[string][]int // descriptor path -> the line of each descriptor with it
	rateLimit  map[string]int   // descriptor path -> line of its rate_limit
	emptyKey   map[string]int   // parent path ("" at the top) -> first descriptor with no key
}

// indexRLS indexes data; a file that is not YAML gives an empty index.
func indexRLS(data []byte) rlsIndex {
	idx := rlsIndex{lines: map[string][]int{}, rateLimit: map[string]int{}, emptyKey: map[string]int{}}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return idx
	}
	root := doc.Content[0]
	if k, v := mappingValue(root, "domain"); k != nil {
		idx.domain, idx.domainLine = v.Value, k.Line
	}
	if _, seq := mappingValue(root, "descriptors"); seq != nil {
		idx.descriptors(seq, "")
	}
	return idx
}

// descriptors indexes a sequence of descriptors under the path parent, as
// the loader names them.
func (idx *rlsIndex) descriptors(seq *yaml.Node, parent string) {
	if seq.Kind != yaml.SequenceNode {
		return
	}
	for _, d := range seq.Content {
		if d.Kind != yaml.MappingNode {
			continue
		}
		key, value := scalarValue(d, "key"), scalarValue(d, "value")
		if key == "" {
			if _, seen := idx.emptyKey[parent]; !seen {
				idx.emptyKey[parent] = d.Line
			}
			continue
		}
		here := key
		if value != "" {
			here += "=" + value
		}
		if parent != "" {
			here = parent + " > " + here
		}
		idx.lines[here] = append(idx.lines[here], d.Line)
		if k, _ := mappingValue(d, "rate_limit"); k != nil {
			idx.rateLimit[here] = k.Line
		}
		if _, sub := mappingValue(d, "descriptors"); sub != nil {
			idx.descriptors(sub, here)
		}
	}
}

// line returns the line that the loader's message msg is about, or 0.
func (idx *rlsIndex) line(msg string) int {
	switch {
	case strings.HasPrefix(msg, "domain is "):
		return idx.domainLine
	case strings.Contains(msg, "a top-level descriptor has an empty key"):
		return idx.emptyKey[""]
	}
	best, line := "", 0
	for path, lines := range idx.lines {
		q := strconv.Quote(path)
		switch {
		case len(path) <= len(best):
		case strings.Contains(msg, "duplicate descriptor "+q) && len(lines) > 1:
			best, line = path, lines[1]
		case strings.Contains(msg, "descriptor under "+q+" has an empty key"):
			best, line = path, idx.emptyKey[path]
		case strings.Contains(msg, "descriptor "+q+": "):
			best, line = path, lines[0]
			if rl := idx.rateLimit[path]; rl > 0 {
				line = rl
			}
		}
	}
	return line
}

// rlsLine matches the start of one of yaml.v3's messages with a line.
var rlsLine = regexp.MustCompile(`^(?:yaml: )?line \d+: `)

// rlsProblems turns the loader's error about file (whose content is data)
// into problems, each with its line: yaml.v3's messages carry theirs, and
// the others are found by the descriptor path they name.
func rlsProblems(file string, data []byte, err error) []problem {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, rls.ErrInvalidConfig.Error()+": ")
	msg = strings.TrimPrefix(msg, file+": ")
	if !rlsLine.MatchString(msg) {
		idx := indexRLS(data)
		return []problem{{where: file, line: idx.line(msg), msg: msg}}
	}
	// The loader joins yaml.v3's messages with "; ", each "line N: ...".
	var msgs []string
	for _, part := range strings.Split(msg, "; ") {
		if rlsLine.MatchString(part) || len(msgs) == 0 {
			msgs = append(msgs, part)
		} else {
			msgs[len(msgs)-1] += "; " + part
		}
	}
	out := make([]problem, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, lineProblem(file, m))
	}
	return out
}

// mappingValue returns the key and value nodes of key in the mapping m.
func mappingValue(m *yaml.Node, key string) (k, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}

// scalarValue returns the scalar value of key in the mapping m, or "".
func scalarValue(m *yaml.Node, key string) string {
	if _, v := mappingValue(m, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}
