// Command sluice is the Sluice rate limiter's executable.
//
//	sluice serve     run the HTTP API (Unkey v2 compatible)
//	sluice hash-key  print the SHA-256 of a root key read from standard input
//	sluice sim       simulate deployments in virtual time (docs/sim.md)
//	sluice version   print the version
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
	"runtime/debug"

	"github.com/alecthomas/kong"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// cli is the command line.
type cli struct {
	Config  kong.ConfigFlag `help:"YAML file of flag values (keys are flag names, e.g. http-addr)." type:"existingfile" env:"SLUICE_CONFIG"`
	Serve   serveCmd        `cmd:"" help:"Run the HTTP API server."`
	HashKey hashKeyCmd      `cmd:"" name:"hash-key" help:"Print the SHA-256 of a root key read from standard input, for --root-key-sha256."`
	Sim     simCmd          `cmd:"" help:"Simulate deployments in virtual time and compare them with the exact model (docs/sim.md)."`
	Version versionCmd      `cmd:"" help:"Print the version and exit."`
}

type versionCmd struct{}

func (versionCmd) Run(out io.Writer) error {
	goVersion := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
	}
	_, err := fmt.Fprintf(out, "sluice %s (%s)\n", version, goVersion)
	return err
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run parses args and runs the chosen command; it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var c cli
	exit := -1
	parser, err := kong.New(&c,
		kong.Name("sluice"),
		kong.Description("Sluice: a distributed rate limiter with an Unkey-compatible HTTP API."),
		kong.UsageOnError(),
		kong.DefaultEnvars("SLUICE"),
		kong.Configuration(yamlLoader),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { exit = code; panic(exitPanic{}) }),
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

// exitPanic unwinds kong's --help exit into run's return value.
type exitPanic struct{}
