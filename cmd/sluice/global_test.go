package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
)

// TestMySQLReadDSN parses `sluice serve` command lines and environments
// and checks where --mysql-read-dsn (SLUICE_MYSQL_READ_DSN) goes: into the
// global store's Config.ReadDSN, refused when it does not parse (without
// quoting it) or comes without --mysql-dsn.
func TestMySQLReadDSN(t *testing.T) {
	const primary, replica = "sluice:pw@tcp(db:3306)/sluice", "reader:secret@tcp(replica:3306)/sluice"
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    string // Config.ReadDSN
		wantErr string // "" = starts
	}{
		{"unset", []string{"--mysql-dsn", primary}, nil, "", ""},
		{"flag", []string{"--mysql-dsn", primary, "--mysql-read-dsn", replica}, nil, replica, ""},
		{"environment", []string{"--mysql-dsn", primary}, map[string]string{"SLUICE_MYSQL_READ_DSN": replica}, replica, ""},
		{"without --mysql-dsn", []string{"--mysql-read-dsn", replica}, nil, replica, "--mysql-read-dsn needs --mysql-dsn"},
		{"does not parse", []string{"--mysql-dsn", primary, "--mysql-read-dsn", "reader:secret@tcp(replica:3306"}, nil, "", "--mysql-read-dsn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var c cli
			parser, err := kong.New(&c, kong.DefaultEnvars("SLUICE"), kong.Configuration(yamlLoader))
			if err != nil {
				t.Fatal(err)
			}
			_, err = parser.Parse(append([]string{"serve"}, tc.args...))
			if err == nil {
				err = startGlobalWithoutPrimary(&c.Serve)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "secret") {
					t.Fatalf("error %v, want one that names %s and quotes no password", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Serve.globalStore(slog.New(slog.DiscardHandler), nil).ReadDSN; got != tc.want {
				t.Fatalf("Config.ReadDSN = %q, want %q", got, tc.want)
			}
		})
	}
}

// startGlobalWithoutPrimary runs c's newGlobal when c has no --mysql-dsn
// (it then opens nothing), to see whether the server would start.
func startGlobalWithoutPrimary(c *serveCmd) error {
	if c.MySQLDSN != "" {
		return nil
	}
	var cfg sluice.Config
	err := c.newGlobal(context.Background(), &cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), &cleanup{})
	if err == nil && cfg.Global != nil {
		return errors.New("a global layer without --mysql-dsn")
	}
	return err
}
