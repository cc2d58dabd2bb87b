package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"
	yaml "go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/server/rls"
)

// checkConfigFile checks the --config file at path against flags, key by
// key, the way yamlLoader and kong would read it: the YAML's syntax, a
// mapping at the top, no unknown or repeated key, and each value parsed as
// its flag's type (and enum). It returns the line of each key by flag name.
func checkConfigFile(path string, flags []*kong.Flag) (map[string]int, []problem) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, []problem{{where: path, msg: unwrapPathError(err).Error()}}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlProblems(path, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil // an empty file sets nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, []problem{{where: path, line: root.Line, msg: "want a mapping of flag names to values (e.g. http-addr: 127.0.0.1:7070)"}}
	}
	byName := make(map[string]*kong.Flag, len(flags))
	for _, f := range flags {
		byName[f.Name] = f
	}
	keys := map[string]int{}
	var problems []problem
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := strings.ReplaceAll(k.Value, "_", "-")
		if first, dup := keys[name]; dup {
			problems = append(problems, problem{path, k.Line, fmt.Sprintf("key %q is set again (first at line %d)", k.Value, first)})
			continue
		}
		keys[name] = k.Line
		f := byName[name]
		if f == nil {
			problems = append(problems, problem{path, k.Line, fmt.Sprintf("unknown key %q (keys are the flags of sluice serve, e.g. http-addr)", k.Value)})
			continue
		}
		if err := checkFlagValue(f, v); err != nil {
			msg := err.Error()
			if !strings.Contains(msg, "--"+f.Name) {
				msg = k.Value + ": " + msg
			}
			problems = append(problems, problem{path, v.Line, msg})
		}
	}
	return keys, problems
}

// checkFlagValue parses v as the value of f, as the --config resolver
// hands it to kong: a list becomes its items joined with ','.
func checkFlagValue(f *kong.Flag, v *yaml.Node) error {
	var val any
	if err := v.Decode(&val); err != nil {
		return fmt.Errorf("value: %w", err)
	}
	switch x := val.(type) {
	case nil:
		return nil // no value: the flag keeps its default
	case map[string]any:
		return errors.New("want a value, not a mapping")
	case []any:
		if !f.IsSlice() {
			return fmt.Errorf("--%s takes one value, not a list", f.Name)
		}
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = fmt.Sprint(e)
		}
		val = strings.Join(parts, ",")
	}
	target := reflect.New(f.Target.Type()).Elem()
	if err := f.Parse(kong.ScanFromTokens(kong.Token{Type: kong.FlagValueToken, Value: val}), target); err != nil {
		return err //nolint:wrapcheck // kong's message names the flag
	}
	if f.Enum == "" {
		return nil
	}
	values := []reflect.Value{target}
	if target.Kind() == reflect.Slice {
		values = values[:0]
		for i := range target.Len() {
			values = append(values, target.Index(i))
		}
	}
	for _, e := range values {
		if s := fmt.Sprint(e.Interface()); !f.EnumMap()[s] {
			return fmt.Errorf("--%s must be one of %s, not %q", f.Name, strings.Join(quoteAll(f.EnumSlice()), ", "), s)
		}
	}
	return nil
}

// quoteAll quotes each string.
func quoteAll(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = strconv.Quote(s)
	}
	return out
}

// unwrapPathError drops the operation and path that os adds to an error,
// for messages that already name the file.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// yamlLine matches the line number that yaml.v3 puts in its messages.
var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlProblems turns a yaml.v3 error into problems of file, with the line
// each names: a TypeError holds one message per field.
func yamlProblems(file string, err error) []problem {
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var out []problem
	for _, msg := range msgs {
		out = append(out, lineProblem(file, msg))
	}
	return out
}

// lineProblem makes a problem of file from a message that may start with
// yaml.v3's "line N: ". yaml.v3 counts the lines of its parser's errors
// ("did not find expected ...") from 0 and those of its scanner from 1;
// the problem's line counts from 1.
func lineProblem(file, msg string) problem {
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		if strings.HasPrefix(m[2], "did not find expected") {
			n++
		}
		return problem{where: file, line: n, msg: m[2]}
	}
	return problem{where: file, msg: strings.TrimPrefix(msg, "yaml: ")}
}

// checkPEMFile checks that path holds at least one PEM certificate.
func checkPEMFile(path string) error {
	pem, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s: no PEM certificate in the file", path)
	}
	return nil
}

// checkRLSConfig checks the Envoy RLS configuration at path (a file, or a
// folder of *.yaml and *.yml files, as serve loads it) file by file, with
// the line of each problem, then as a whole (one domain per file).
func checkRLSConfig(path string) []problem {
	files, err := rlsFiles(path)
	if err != nil {
		return []problem{{where: path, msg: err.Error()}}
	}
	var problems []problem
	domains := map[string]string{} // domain -> first file
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			problems = append(problems, problem{where: file, msg: unwrapPathError(err).Error()})
			continue
		}
		if _, err := rls.Parse(file, data); err != nil {
			problems = append(problems, rlsProblems(file, data, err)...)
			continue
		}
		idx := indexRLS(data)
		if first, dup := domains[idx.domain]; dup {
			problems = append(problems, problem{file, idx.domainLine, fmt.Sprintf("domain %q is configured in %s too (one file per domain)", idx.domain, first)})
			continue
		}
		domains[idx.domain] = file
	}
	if len(problems) == 0 {
		if _, err := rls.Load(path); err != nil { // whatever the file checks missed
			problems = append(problems, problem{where: path, msg: err.Error()})
		}
	}
	return problems
}

// rlsFiles lists the files that rls.Load reads at path: path itself, or a
// folder's *.yaml and *.yml files that are not hidden (symbolic links
// followed, as in a Kubernetes ConfigMap).
func rlsFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, unwrapPathError(err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, unwrapPathError(err)
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		ext := filepath.Ext(name)
		if strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		full := filepath.Join(path, name)
		if st, err := os.Stat(full); err == nil && !st.IsDir() {
			files = append(files, full)
		}
	}
	if len(files) == 0 {
		return nil, errors.New("no *.yaml or *.yml file in the folder")
	}
	return files, nil
}
