package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// These are set at link time by scripts/release.sh:
//
//	-ldflags "-X main.version=v1.2.3 -X main.commit=<sha> -X main.date=<RFC 3339>"
//
// A plain `go build` leaves version "dev" and date "unknown", and takes the
// commit from the VCS stamp Go embeds when it builds inside a checkout.
var (
	version = "dev"
	commit  = ""
	date    = "unknown"
)

// versionCmd is `sluice version`.
type versionCmd struct{}

// Run prints the version, then the commit, build date and Go version on
// lines of their own:
//
//	sluice v1.2.3
//	commit: 0123abcd…
//	built:  2026-11-24T11:00:00Z
//	go:     go1.26.8 linux/amd64
func (versionCmd) Run(out io.Writer) error {
	info := buildInfo()
	_, err := fmt.Fprintf(out, "sluice %s\ncommit: %s\nbuilt:  %s\ngo:     %s\n", info.version, info.commit, info.date, info.goVersion)
	if err != nil {
		return fmt.Errorf("version: %w", err)
	}
	return nil
}

// build describes the running executable.
type build struct {
	version, commit, date, goVersion string
}

// buildInfo returns the stamped version, commit and date, falling back to
// the VCS revision (with "-dirty" for a modified tree) that the Go
// toolchain embeds when the commit was not stamped.
func buildInfo() build {
	b := build{version: version, commit: commit, date: date, goVersion: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	if b.commit != "" {
		return b
	}
	b.commit = "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.commit = vcsRevision(bi.Settings)
	}
	return b
}

// vcsRevision returns the vcs.revision build setting, "-dirty" added when
// vcs.modified is true, or "unknown".
func vcsRevision(settings []debug.BuildSetting) string {
	rev, dirty := "unknown", false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && rev != "unknown" {
		rev += "-dirty"
	}
	return rev
}
