package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
)

// migrations holds the schema, one file per version: NNNN_name.sql, run in
// order. Every statement must be safe to run again (CREATE TABLE IF NOT
// EXISTS, DROP TABLE IF EXISTS, CREATE INDEX, whose "duplicate key name"
// apply ignores; MySQL 8 lacks ADD COLUMN IF NOT EXISTS, so a column change
// there is a new table or a guarded procedure): DDL commits on its own, so
// a node that dies halfway leaves a version that the next start runs
// again.
//
//go:embed migrations/*.sql
var migrations embed.FS

// migration is one version of the schema.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads every NNNN_name.sql file of fsys's migrations
// directory, sorted by version.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, name := range names {
		base := path.Base(name)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name is not NNNN_name.sql", base)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: base, sql: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share a version", ms[i-1].name, ms[i].name)
		}
	}
	return ms, nil
}

// lockName returns a GET_LOCK name for purpose, unique to the database and
// table prefix (lock names are server-wide and at most 64 characters).
func lockName(database, prefix, purpose string) string {
	h := sha256.Sum256([]byte(database + "\x00" + prefix))
	return "sluice_global:" + hex.EncodeToString(h[:12]) + ":" + purpose
}

// migrate brings the schema of prefix to the last of ms. It holds a named
// lock on one connection while it works, so nodes starting together migrate
// one after the other; each applies only the versions not yet recorded in
// {p}schema_version. It returns the versions it applied.
func migrate(ctx context.Context, db *sql.DB, prefix string, ms []migration, wait time.Duration, log *slog.Logger) (applied []int, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var database sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&database); err != nil {
		return nil, err
	}
	lock := lockName(database.String, prefix, "migrate")
	if err := getLock(ctx, conn, lock, wait); err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, releaseLock(conn, lock)) }()

	r := strings.NewReplacer("{p}", prefix)
	if _, err := conn.ExecContext(ctx, r.Replace(
		"CREATE TABLE IF NOT EXISTS {p}schema_version (version INT NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL, applied_at DATETIME(6) NOT NULL) ENGINE=InnoDB")); err != nil {
		return nil, err
	}
	var current int
	if err := conn.QueryRowContext(ctx, r.Replace("SELECT COALESCE(MAX(version), 0) FROM {p}schema_version")).Scan(&current); err != nil {
		return nil, err
	}
	if n := len(ms); n > 0 && current > ms[n-1].version {
		log.Warn("global/mysql: the schema is newer than this binary; running on it", "schema_version", current, "known", ms[n-1].version)
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		if err := apply(ctx, conn, r, m); err != nil {
			return applied, fmt.Errorf("migration %s: %w", m.name, err)
		}
		log.Info("global/mysql: applied migration", "version", m.version, "name", m.name, "prefix", prefix)
		applied = append(applied, m.version)
	}
	return applied, nil
}

// apply runs m's statements (separated by ";" at the end of a line) and
// records its version.
func apply(ctx context.Context, conn *sql.Conn, r *strings.Replacer, m migration) error {
	for stmt := range strings.SplitSeq(r.Replace(m.sql), ";\n") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		if _, err := conn.ExecContext(ctx, stmt); err != nil && !indexExists(err) {
			return err
		}
	}
	_, err := conn.ExecContext(ctx, r.Replace("INSERT INTO {p}schema_version (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))"), m.version, m.name)
	return err
}

// indexExists reports whether err is MySQL's error 1061, "duplicate key
// name": a CREATE INDEX run again by a migration that did not finish.
func indexExists(err error) bool {
	me, ok := errors.AsType[*mysqldriver.MySQLError](err)
	return ok && me.Number == 1061
}

// stripComments drops the "--" comment lines of stmt.
func stripComments(stmt string) string {
	var b strings.Builder
	for line := range strings.Lines(stmt) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// errLockBusy reports that GET_LOCK timed out: another session holds it.
var errLockBusy = errors.New("lock held by another session")

// getLock takes the named lock on conn, waiting up to wait (0: do not
// wait). It returns errLockBusy when the lock stayed taken.
func getLock(ctx context.Context, conn *sql.Conn, name string, wait time.Duration) error {
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, wait.Seconds()).Scan(&got); err != nil {
		return err
	}
	switch {
	case !got.Valid:
		return fmt.Errorf("GET_LOCK(%q) returned NULL", name)
	case got.Int64 != 1:
		return fmt.Errorf("GET_LOCK(%q): %w", name, errLockBusy)
	}
	return nil
}

// releaseLock releases the named lock on conn. If it cannot (the context
// ended, the connection broke), it makes database/sql discard conn: the
// server releases a session's locks when the session ends, and a pooled
// session would otherwise keep the lock.
func releaseLock(conn *sql.Conn, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", name); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return fmt.Errorf("release lock %q: %w", name, err)
	}
	return nil
}
