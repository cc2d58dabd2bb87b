package main

import (
	"bufio"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/alecthomas/kong"
	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/server"
)

// maxRootKeyLineBytes bounds a line of --root-key-file.
const maxRootKeyLineBytes = 64 << 10

// AfterApply records which flags the command line set, as opposed to the
// environment or --config, for warnSecretsInArgv. kong calls it once the
// flags are parsed.
func (c *serveCmd) AfterApply(kctx *kong.Context) error {
	c.argv = make(map[string]bool)
	for _, p := range kctx.Path {
		if p.Flag != nil {
			c.argv[p.Flag.Name] = true
		}
	}
	return nil
}

// secretFlag is a flag that may carry a secret, and where else to give it.
type secretFlag struct {
	name    string
	instead string
	secret  func(c *serveCmd) bool // whether the value holds a secret
}

var secretFlags = []secretFlag{
	{"root-key", "--root-key-file, SLUICE_ROOT_KEYS or --root-key-sha256", func(c *serveCmd) bool { return len(c.RootKey) > 0 }},
	{"cluster-secret", "--cluster-secret-file or SLUICE_CLUSTER_SECRET", func(c *serveCmd) bool { return c.ClusterSecret != "" }},
	{"mysql-dsn", "SLUICE_MYSQL_DSN", func(c *serveCmd) bool { return dsnHasPassword(c.MySQLDSN) }},
	{"mysql-read-dsn", "SLUICE_MYSQL_READ_DSN", func(c *serveCmd) bool { return dsnHasPassword(c.MySQLReadDSN) }},
	{"redis-url", "SLUICE_REDIS_URL", func(c *serveCmd) bool { return urlHasPassword(c.RedisURL) }},
}

// secretsInArgv returns the flags that the command line set to a secret,
// which any local user can read (ps, /proc/PID/cmdline).
func (c *serveCmd) secretsInArgv() []secretFlag {
	var out []secretFlag
	for _, f := range secretFlags {
		if c.argv[f.name] && f.secret(c) {
			out = append(out, f)
		}
	}
	return out
}

// warnSecretsInArgv logs a warning for each secret given as a flag.
func (c *serveCmd) warnSecretsInArgv(log *slog.Logger) {
	for _, f := range c.secretsInArgv() {
		log.Warn("a secret is given on the command line, where any local user can read it (ps, /proc/PID/cmdline); pass it by file or environment instead",
			"flag", "--"+f.name, "instead", f.instead)
	}
}

// dsnHasPassword reports whether the MySQL DSN holds a password.
func dsnHasPassword(dsn string) bool {
	if dsn == "" {
		return false
	}
	cfg, err := mysqldriver.ParseDSN(dsn)
	return err != nil || cfg.Passwd != "" // unparsable: it may hold one
}

// urlHasPassword reports whether the URL holds a password.
func urlHasPassword(raw string) bool {
	if raw == "" {
		return false
	}
	u, err := url.Parse(raw)
	if err != nil {
		return true // unparsable: it may hold one
	}
	_, ok := u.User.Password()
	return ok
}

// readRootKeyFile reads the root keys of path: one KEY:WORKSPACE per line,
// as --root-key takes them; blank lines and lines starting with '#' are
// skipped. An error names the line, never the key.
func readRootKeyFile(path string) ([]server.RootKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--root-key-file: %w", err)
	}
	defer f.Close()
	var keys []server.RootKey
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), maxRootKeyLineBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := server.ParseRootKey(line)
		if err != nil {
			return nil, fmt.Errorf("--root-key-file %s, line %d: %w", path, n, err)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--root-key-file %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--root-key-file %s: no KEY:WORKSPACE line in the file", path)
	}
	return keys, nil
}
