package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/alecthomas/kong"
	mysqldriver "github.com/go-sql-driver/mysql"
)

// checkCmd is `sluice check [SERVE FLAGS]`: it reads a configuration the
// way `sluice serve` would (flags, SLUICE_* variables, --config) and checks
// it and the files it names (--config, --rls-config, --root-key-file,
// --cluster-secret-file, the TLS files) without serving and without
// reaching Redis or MySQL. It prints each problem on a line of its own,
// FILE:LINE: for a file, and exits with status 1 when there is one.
//
// run hands `check` to runCheck before kong parses anything, so that a
// broken --config is reported with its lines instead of stopping the
// parse; this struct gives `sluice --help` its entry.
type checkCmd struct {
	Args []string `arg:"" optional:"" passthrough:"" placeholder:"SERVE-FLAGS" help:"The flags of serve (sluice check --help lists them)."`
}

// Run checks the arguments kong collected; run normally calls runCheck
// itself first.
func (c checkCmd) Run(ctx context.Context, out io.Writer) error {
	if code := runCheck(ctx, c.Args, out, out); code != 0 {
		return errors.New("check: the configuration has problems")
	}
	return nil
}

// checkFlags is what `sluice check` parses: --config and the flags of
// serve, with serve's validation.
type checkFlags struct {
	Config kong.ConfigFlag `help:"YAML file of flag values (keys are flag names, e.g. http-addr)." type:"existingfile" env:"SLUICE_CONFIG"`
	Serve  serveCmd        `embed:""`
}

// problem is one thing wrong with a configuration, and where it is.
type problem struct {
	where string // a file, "command line", an environment variable, or ""
	line  int    // 0 when unknown
	msg   string
}

// String formats p as FILE:LINE: MESSAGE (or WHERE: MESSAGE).
func (p problem) String() string {
	switch {
	case p.where == "":
		return p.msg
	case p.line > 0:
		return fmt.Sprintf("%s:%d: %s", p.where, p.line, p.msg)
	default:
		return fmt.Sprintf("%s: %s", p.where, p.msg)
	}
}

// checkArgs reports whether args select `check`, and returns them without
// the word "check": the top-level flags before it (--config) are flags of
// check too. A --help before it is left to kong.
func checkArgs(args []string) ([]string, bool) {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "check":
			return append(slices.Clone(args[:i]), args[i+1:]...), true
		case a == "--config":
			i++ // its value
		case strings.HasPrefix(a, "--config="):
		default:
			return nil, false
		}
	}
	return nil, false
}

// runCheck checks the configuration of args (serve's flags) and returns the
// exit status: 0 when it is fine, 1 when it has a problem, each printed on
// stdout, 2 when the checker itself could not start.
func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	var flags checkFlags
	exit := -1
	parser, err := newParser(&flags, "sluice check",
		"Check a configuration of 'sluice serve' (its flags, SLUICE_* variables, --config, --rls-config and the files they name) without serving: each problem is printed, FILE:LINE: for a file; the exit status is 1 when there is one.",
		stdout, stderr, &exit)
	if err != nil {
		fmt.Fprintln(stderr, "sluice check:", err)
		return 2
	}
	problems, summary, exited := checkConfig(parser, &flags, args, &exit)
	if exited {
		return exit
	}
	for _, p := range problems {
		fmt.Fprintln(stdout, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "sluice check: %d problem(s)\n", len(problems))
		return 1
	}
	fmt.Fprintf(stdout, "ok: %s\n", summary)
	return 0
}

// checkConfig parses args with parser into flags and gathers the problems
// of the configuration file, of the flags and of the files they name. It
// returns exited when kong asked to exit (--help).
func checkConfig(parser *kong.Kong, flags *checkFlags, args []string, exit *int) (problems []problem, summary string, exited bool) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(exitPanic); !ok {
				panic(v)
			}
			exited = true
		}
	}()
	if slices.Contains(args, "--help") || slices.Contains(args, "-h") {
		_, _ = parser.Parse([]string{"--help"}) // prints the help and exits
	}
	file := configPath(args)
	var keys map[string]int
	if file != "" {
		var fileProblems []problem
		keys, fileProblems = checkConfigFile(file, parser.Model.Flags)
		if len(fileProblems) > 0 {
			return fileProblems, "", false // the flags are checked once the file is fine
		}
	}
	src := sources{file: file, keys: keys}
	kctx, err := parser.Parse(args)
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		kctx = pe.Context
	}
	src.argv = setOnCommandLine(kctx)
	var invalid configErrors
	switch {
	case err == nil:
	case errors.As(err, &invalid):
		for _, e := range invalid {
			problems = append(problems, src.locate(parser, e))
		}
	default: // kong could not parse a value: where no variable set it, the command line did
		p := src.locate(parser, err)
		if p.where == "" && flagInMessage.MatchString(p.msg) {
			p.where = "command line"
		}
		return []problem{p}, "", false
	}
	problems = append(problems, offlineChecks(&flags.Serve, src, parser)...)
	return problems, flags.Serve.summary(), false
}

// configPath returns the --config of args, else $SLUICE_CONFIG, else "".
func configPath(args []string) string {
	path := os.Getenv("SLUICE_CONFIG")
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			path = v
		} else if a == "--config" && i+1 < len(args) {
			path = args[i+1]
			i++
		}
	}
	return path
}

// setOnCommandLine returns the names of the flags that kctx parsed from the
// command line (not resolved from --config).
func setOnCommandLine(kctx *kong.Context) map[string]bool {
	set := map[string]bool{}
	if kctx == nil {
		return set
	}
	for _, p := range kctx.Path {
		if p.Flag != nil && !p.Resolved {
			set[p.Flag.Name] = true
		}
	}
	return set
}

// sources tells where each flag's value came from.
type sources struct {
	file string          // --config, or ""
	keys map[string]int  // flag name -> line of its key in file
	argv map[string]bool // flags set on the command line
}

// flagInMessage finds the first --flag that a message names.
var flagInMessage = regexp.MustCompile(`--([a-z0-9][a-z0-9-]*)`)

// locate attributes err to the source of the first flag it names: the
// command line, the environment or the line of --config that set it.
func (s sources) locate(parser *kong.Kong, err error) problem {
	msg := err.Error()
	m := flagInMessage.FindStringSubmatch(msg)
	if m == nil {
		return problem{msg: msg}
	}
	name := m[1]
	if s.argv[name] {
		return problem{where: "command line", msg: msg}
	}
	for _, f := range parser.Model.Flags {
		if f.Name != name {
			continue
		}
		for _, env := range f.Envs {
			if _, ok := os.LookupEnv(env); ok {
				return problem{where: "$" + env, msg: msg}
			}
		}
	}
	if line, ok := s.keys[name]; ok {
		return problem{where: s.file, line: line, msg: msg}
	}
	return problem{msg: msg}
}

// offlineChecks runs the checks that serve makes at start-up beyond its
// flags' validation, short of connecting anywhere: the cluster flags and
// secret, the TLS files, the MySQL DSN's syntax, a root key for a
// non-loopback address, and the Envoy RLS configuration, line by line.
func offlineChecks(c *serveCmd, src sources, parser *kong.Kong) []problem {
	var errs []error
	if _, err := c.originKind(); err != nil {
		errs = append(errs, err)
	}
	if c.tlsEnabled() {
		if _, _, err := c.load(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.MySQLDSN != "" {
		if _, err := mysqldriver.ParseDSN(c.MySQLDSN); err != nil {
			errs = append(errs, fmt.Errorf("--mysql-dsn: %w", err))
		}
	}
	_, _, addrErr := net.SplitHostPort(c.HTTPAddr)
	if keys, err := c.rootKeys(); err == nil && addrErr == nil && len(keys) == 0 && !isLoopback(c.HTTPAddr) {
		errs = append(errs, fmt.Errorf("--http-addr %s is not a loopback address and no root key is configured: serve refuses to start; set --root-key-sha256, --root-key-file or SLUICE_ROOT_KEYS", c.HTTPAddr))
	}
	if c.RLSClientCA != "" {
		if err := checkPEMFile(c.RLSClientCA); err != nil {
			errs = append(errs, fmt.Errorf("--rls-client-ca: %w", err))
		}
	}
	var problems []problem
	for _, err := range errs {
		problems = append(problems, src.locate(parser, err))
	}
	if c.RLSConfig != "" {
		problems = append(problems, checkRLSConfig(c.RLSConfig)...)
	}
	return problems
}

// summary describes the configuration in force, for check's "ok" line.
func (c *serveCmd) summary() string {
	origin, _ := c.originKind()
	keys, _ := c.rootKeys()
	s := fmt.Sprintf("serve would listen on %s (admin %q), region %s, origin %s, store %s, %d root key(s)",
		c.HTTPAddr, c.AdminAddr, c.Region, origin, c.storeKind(), len(keys))
	if c.RLSConfig != "" {
		s += ", Envoy RLS from " + c.RLSConfig
	}
	return s
}
