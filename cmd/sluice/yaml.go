package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
	yaml "go.yaml.in/yaml/v3"
)

// yamlLoader reads a YAML mapping of flag names to values, e.g.
//
//	http-addr: 127.0.0.1:7070
//	root-key: ["key1:acme", "key2:globex"]
//
// Keys may use '-' or '_'. Unknown keys are an error.
func yamlLoader(r io.Reader) (kong.Resolver, error) {
	values := map[string]any{}
	dec := yaml.NewDecoder(r)
	if err := dec.Decode(&values); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config file: %w", err)
	}
	norm := make(map[string]any, len(values))
	for k, v := range values {
		norm[strings.ReplaceAll(k, "_", "-")] = v
	}
	return &yamlResolver{values: norm}, nil
}

type yamlResolver struct{ values map[string]any }

func (y *yamlResolver) Validate(app *kong.Application) error {
	known := map[string]bool{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			known[f.Name] = true
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(app.Node)
	var unknown []string
	for k := range y.values {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("config file: unknown keys: %s", strings.Join(unknown, ", "))
	}
	return nil
}

// Resolve returns the file's value for flag, unless the flag's environment
// variable is set: the environment beats the file.
func (y *yamlResolver) Resolve(_ *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
	v, ok := y.values[flag.Name]
	if !ok {
		return nil, nil
	}
	for _, env := range flag.Envs {
		if _, set := os.LookupEnv(env); set {
			return nil, nil
		}
	}
	if list, ok := v.([]any); ok {
		parts := make([]string, len(list))
		for i, e := range list {
			parts[i] = fmt.Sprint(e)
		}
		return strings.Join(parts, ","), nil
	}
	return v, nil
}
