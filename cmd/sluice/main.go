// Command sluice is the Sluice rate limiter's executable.
//
//	sluice serve     run the HTTP API (Unkey v2 compatible)
//	sluice hash-key  print the SHA-256 of a root key read from standard input
//	sluice sim       simulate deployments in virtual time (docs/simulator.md)
//	sluice check     validate a configuration without serving
//	sluice version   print the version, commit, build date and Go version
//
// Every flag can also be set with an environment variable SLUICE_<FLAG>
// (dashes become underscores; --root-key is SLUICE_ROOT_KEYS,
// comma-separated) or in a YAML file named by --config, whose keys are the
// flag names. A flag on the command line beats its environment variable,
// which beats the file, which beats the default.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/alecthomas/kong"
)

// cli is the command line.
type cli struct {
	Config  kong.ConfigFlag `help:"YAML file of flag values (keys are flag names, e.g. http-addr)." type:"existingfile" env:"SLUICE_CONFIG"`
	Serve   serveCmd        `cmd:"" help:"Run the HTTP API server."`
	HashKey hashKeyCmd      `cmd:"" name:"hash-key" help:"Print the SHA-256 of a root key read from standard input, for --root-key-sha256."`
	Sim     simCmd          `cmd:"" help:"Simulate deployments in virtual time and compare them with the exact model (docs/simulator.md)."`
	Check   checkCmd        `cmd:"" help:"Validate a configuration (the flags of serve, --config, --rls-config and the files they name) without serving; exit status 1 when it has problems."`
	Version versionCmd      `cmd:"" help:"Print the version, commit, build date and Go version, and exit."`
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run parses args and runs the chosen command; it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if rest, ok := checkArgs(args); ok {
		return runCheck(ctx, rest, stdout, stderr)
	}
	var c cli
	exit := -1
	parser, err := newParser(&c, "sluice", "Sluice: a distributed rate limiter with an Unkey-compatible HTTP API.", stdout, stderr, &exit,
		kong.BindTo(ctx, (*context.Context)(nil)),
		kong.BindTo(stdin, (*io.Reader)(nil)),
		kong.BindTo(stdout, (*io.Writer)(nil)),
	)
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 2
	}
	code, done := func() (code int, done bool) {
		defer func() {
			if v := recover(); v != nil {
				if _, ok := v.(exitPanic); !ok {
					panic(v)
				}
				code, done = exit, true
			}
		}()
		kctx, err := parser.Parse(args)
		if err != nil {
			fmt.Fprintln(stderr, "sluice:", err)
			return 2, true
		}
		if err := kctx.Run(); err != nil {
			fmt.Fprintln(stderr, "sluice:", err)
			return 1, true
		}
		return 0, true
	}()
	if !done {
		return 1
	}
	return code
}

// newParser returns the kong parser of target with the options every
// sluice command line shares: SLUICE_* variables, the YAML --config
// loader, and an exit (--help) that stores its code in exit and unwinds
// with exitPanic, for the caller to recover.
func newParser(target any, name, description string, stdout, stderr io.Writer, exit *int, more ...kong.Option) (*kong.Kong, error) {
	opts := append([]kong.Option{
		kong.Name(name),
		kong.Description(description),
		kong.UsageOnError(),
		kong.DefaultEnvars("SLUICE"),
		kong.Configuration(yamlLoader),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { *exit = code; panic(exitPanic{}) }),
	}, more...)
	parser, err := kong.New(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("command line: %w", err)
	}
	return parser, nil
}

// exitPanic unwinds kong's --help exit into run's return value.
type exitPanic struct{}
