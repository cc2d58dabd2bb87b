package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
)

// configurationPage is docs/reference/configuration.md.
var configurationPage = referencePage{
	path:    "../../docs/reference/configuration.md",
	command: "go test ./cmd/sluice -run TestConfigurationReference -update",
}

// TestConfigurationReference fails when the flags listed in
// docs/reference/configuration.md differ from the command line that kong
// builds from the code: every command, every flag with its environment
// variable, YAML key, default and help. Regenerate the page with:
//
//	go test ./cmd/sluice -run TestConfigurationReference -update
func TestConfigurationReference(t *testing.T) {
	var out bytes.Buffer
	if err := writeConfigurationReference(&out); err != nil {
		t.Fatal(err)
	}
	checkReferencePage(t, configurationPage, out.Bytes())
}

// writeConfigurationReference writes the generated part of the
// configuration reference: a section per command of the kong model of cli,
// in the order `sluice --help` lists them, each with its flags sorted by
// name.
func writeConfigurationReference(w io.Writer) error {
	var c cli
	exit := -1
	parser, err := newParser(&c, "sluice", "", io.Discard, io.Discard, &exit)
	if err != nil {
		return err
	}
	if err := checkFlagsAreServes(); err != nil {
		return err
	}
	root := parser.Model.Node
	fmt.Fprintf(w, "\n## Every command\n\nThe flags of `sluice` itself, which every command takes.\n\n")
	writeFlagTable(w, root.Flags)
	for _, cmd := range root.Children {
		if cmd.Hidden {
			continue
		}
		writeCommand(w, cmd)
	}
	writeSharedEnvs(w, root)
	writeSecretFlags(w)
	return nil
}

// writeSecretFlags lists the flags of serve that may hold a secret
// (secretFlags): given on the command line, each logs a warning at start.
func writeSecretFlags(w io.Writer) {
	fmt.Fprintf(w, "\n## Secrets on the command line\n\nThe command line of a process is readable by every local user (`ps`, `/proc/PID/cmdline`). `sluice serve` logs a warning at start (`a secret is given on the command line`) for each of these flags given there with a secret in it; give the value in its other place instead:\n\n| flag | give it instead in |\n|---|---|\n")
	for _, f := range secretFlags {
		fmt.Fprintf(w, "| `--%s` | %s |\n", f.name, mdCell(f.instead))
	}
}

// writeSharedEnvs lists the environment variables (and so the YAML keys)
// that flags of several commands share: set for one command, they apply
// to the others too.
func writeSharedEnvs(w io.Writer, root *kong.Node) {
	users := map[string][]string{}
	for _, cmd := range root.Children {
		for _, f := range visibleFlags(cmd.Flags) {
			for _, e := range f.Envs {
				users[e] = append(users[e], fmt.Sprintf("`sluice %s --%s`", cmd.Name, f.Name))
			}
		}
	}
	var shared []string
	for e, flags := range users {
		if len(flags) > 1 {
			shared = append(shared, fmt.Sprintf("- `%s` (YAML key `%s`): %s", e, strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(e, "SLUICE_")), "_", "-"), strings.Join(flags, ", ")))
		}
	}
	if len(shared) == 0 {
		return
	}
	slices.Sort(shared)
	fmt.Fprintf(w, "\n## Variables shared by several commands\n\nEach of these environment variables, and the YAML key of the same name in a `--config` file, sets the flag of every command listed:\n\n%s\n", strings.Join(shared, "\n"))
}

// writeCommand writes the section of one command.
func writeCommand(w io.Writer, cmd *kong.Node) {
	fmt.Fprintf(w, "\n## sluice %s\n\n%s\n", cmd.Name, cmd.Help)
	if cmd.Detail != "" && cmd.Detail != cmd.Help {
		fmt.Fprintf(w, "\n```text\n%s\n```\n", strings.TrimSpace(cmd.Detail))
	}
	if len(cmd.Positional) > 0 {
		fmt.Fprintf(w, "\n| argument | description |\n|---|---|\n")
		for _, p := range cmd.Positional {
			fmt.Fprintf(w, "| `%s` | %s |\n", p.Summary(), mdCell(p.Help))
		}
	}
	switch {
	case cmd.Name == "check":
		fmt.Fprintf(w, "\nIts flags are those of [`sluice serve`](#sluice-serve) and `--config`, read from the same environment variables and YAML keys.\n")
	case len(visibleFlags(cmd.Flags)) == 0:
		fmt.Fprintf(w, "\nNo flags of its own.\n")
	default:
		fmt.Fprintln(w)
		writeFlagTable(w, cmd.Flags)
	}
}

// writeFlagTable writes a table of flags, sorted by name, leaving out the
// hidden ones and --help.
func writeFlagTable(w io.Writer, flags []*kong.Flag) {
	flags = visibleFlags(flags)
	slices.SortFunc(flags, func(a, b *kong.Flag) int { return strings.Compare(a.Name, b.Name) })
	fmt.Fprintf(w, "| flag | environment variable | YAML key | default | description |\n|---|---|---|---|---|\n")
	for _, f := range flags {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", flagSynopsis(f), flagEnv(f), flagYAML(f), flagDefault(f), mdCell(f.Help))
	}
}

// visibleFlags returns the flags `--help` lists, without --help itself.
func visibleFlags(flags []*kong.Flag) []*kong.Flag {
	var out []*kong.Flag
	for _, f := range flags {
		if !f.Hidden && f.Name != "help" {
			out = append(out, f)
		}
	}
	return out
}

// flagSynopsis is the flag as given on the command line: `--name VALUE`,
// `--[no-]name` for a negatable boolean.
func flagSynopsis(f *kong.Flag) string {
	if f.IsBool() {
		if f.Tag.Negatable != "" {
			return fmt.Sprintf("`--[no-]%s`", f.Name)
		}
		return fmt.Sprintf("`--%s`", f.Name)
	}
	return fmt.Sprintf("`--%s %s`", f.Name, flagValue(f))
}

// flagValue names the value a flag takes: its placeholder, the choices of
// an enum, or its type.
func flagValue(f *kong.Flag) string {
	switch {
	case f.Enum != "":
		var choices []string
		for e := range strings.SplitSeq(f.Enum, ",") {
			if e = strings.TrimSpace(e); e != "" {
				choices = append(choices, e)
			}
		}
		return strings.Join(choices, "\\|")
	case f.PlaceHolder != "":
		return f.PlaceHolder
	}
	t := f.Target.Type()
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "DURATION"
	case t == reflect.TypeFor[kong.ConfigFlag]():
		return "FILE"
	case t.Kind() == reflect.Float64:
		return "NUMBER"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "INT"
	case f.Tag.Type == "path" || f.Tag.Type == "existingfile":
		return "PATH"
	}
	return "STRING"
}

// flagEnv lists a flag's environment variables; a repeatable flag's take a
// comma-separated list.
func flagEnv(f *kong.Flag) string {
	if len(f.Envs) == 0 {
		return "–"
	}
	envs := make([]string, len(f.Envs))
	for i, e := range f.Envs {
		envs[i] = "`" + e + "`"
	}
	s := strings.Join(envs, ", ")
	if f.IsSlice() {
		s += " (comma-separated)"
	}
	return s
}

// flagYAML is a flag's key in the --config file (yamlLoader): its name; a
// repeatable flag's takes a list. --config itself has none.
func flagYAML(f *kong.Flag) string {
	switch {
	case f.Target.Type() == reflect.TypeFor[kong.ConfigFlag]():
		return "–"
	case f.IsSlice():
		return "`" + f.Name + "` (a list)"
	}
	return "`" + f.Name + "`"
}

// flagDefault is a flag's default (false for a boolean without one), or
// – when it has none.
func flagDefault(f *kong.Flag) string {
	if f.IsBool() && !f.HasDefault {
		return "`false`"
	}
	if !f.HasDefault || f.Default == "" {
		return "–"
	}
	return "`" + f.Default + "`"
}

// checkFlagsAreServes verifies what the page says of `sluice check`: its
// parser (checkFlags) takes exactly the flags of serve and --config.
func checkFlagsAreServes() error {
	names := func(target any) ([]string, error) {
		exit := -1
		p, err := newParser(target, "sluice", "", io.Discard, io.Discard, &exit)
		if err != nil {
			return nil, err
		}
		var out []string
		var walk func(n *kong.Node)
		walk = func(n *kong.Node) {
			for _, f := range visibleFlags(n.Flags) {
				out = append(out, fmt.Sprintf("%s %v %q", f.Name, f.Envs, f.Default))
			}
			for _, c := range n.Children {
				if c.Name == "serve" {
					walk(c)
				}
			}
		}
		walk(p.Model.Node)
		slices.Sort(out)
		return out, nil
	}
	check, err := names(&checkFlags{})
	if err != nil {
		return err
	}
	serve, err := names(&struct {
		Config kong.ConfigFlag `help:"YAML file of flag values (keys are flag names, e.g. http-addr)." type:"existingfile" env:"SLUICE_CONFIG"`
		Serve  serveCmd        `cmd:""`
	}{})
	if err != nil {
		return err
	}
	if !slices.Equal(check, serve) {
		return fmt.Errorf("the flags of sluice check are not those of serve and --config:\n check: %v\n serve: %v", check, serve)
	}
	return nil
}

// TestConfigurationExamples checks that every YAML example of
// docs/reference/configuration.md is a --config file that sluice accepts:
// valid YAML whose keys are all flags.
func TestConfigurationExamples(t *testing.T) {
	page, err := os.ReadFile(configurationPage.path)
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(page, -1)
	if len(blocks) == 0 {
		t.Fatalf("%s has no YAML example", configurationPage.path)
	}
	var c cli
	exit := -1
	parser, err := newParser(&c, "sluice", "", io.Discard, io.Discard, &exit)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range blocks {
		r, err := yamlLoader(bytes.NewReader(b[1]))
		if err != nil {
			t.Errorf("example %d: %v", i+1, err)
			continue
		}
		if err := r.Validate(parser.Model); err != nil {
			t.Errorf("example %d: %v", i+1, err)
		}
	}
}
