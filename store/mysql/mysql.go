// Package mysql is the MySQL/MariaDB store of namespaces and overrides,
// shared by every node of a deployment (enabled by --mysql-dsn). Its schema
// is embedded and applied idempotently (CREATE TABLE IF NOT EXISTS) by Open.
//
// Every write also increments a version row in the same transaction; the
// store implements store.Watcher by polling that row (one primary-key read
// per Config.PollInterval), so a store.Cache sees other nodes' changes
// within about one poll interval.
package mysql

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/internal/sqlstore"
)

// DefaultTablePrefix prefixes the store's table names.
const DefaultTablePrefix = "sluice_"

// DefaultPollInterval is the default period at which Watch reads the
// version row.
const DefaultPollInterval = 200 * time.Millisecond

// ErrInvalidConfig is returned, wrapped with the reason, by Config.Validate.
var ErrInvalidConfig = errors.New("store/mysql: invalid config")

//go:embed schema.sql
var schema string

var validPrefix = regexp.MustCompile(`^[A-Za-z0-9_]{0,32}$`)

// Config configures the MySQL store.
type Config struct {
	// DSN is a go-sql-driver/mysql data source name, e.g.
	// "user:pass@tcp(127.0.0.1:3306)/sluice". Required.
	DSN string
	// TablePrefix prefixes table names (letters, digits, '_'; at most 32).
	// Default DefaultTablePrefix. Tests use a unique prefix each.
	TablePrefix string
	// MaxOpenConns bounds the connection pool. Default 8.
	MaxOpenConns int
	// PollInterval is how often Watch reads the version row. Default
	// DefaultPollInterval (200ms).
	PollInterval time.Duration
	// MaxOverrides bounds the overrides of one namespace: a new override
	// past it fails with a *store.LimitError, however many nodes write at
	// once. Default store.DefaultMaxOverrides.
	MaxOverrides int
	// Logger receives Watch's failures and recoveries. Default: discard.
	Logger *slog.Logger
}

// Validate reports the first invalid field of c.
func (c Config) Validate() error {
	if c.DSN == "" {
		return fmt.Errorf("%w: DSN is empty", ErrInvalidConfig)
	}
	if _, err := driver.ParseDSN(c.DSN); err != nil {
		return fmt.Errorf("%w: DSN: %w", ErrInvalidConfig, err)
	}
	if !validPrefix.MatchString(c.TablePrefix) {
		return fmt.Errorf("%w: TablePrefix %q is not [A-Za-z0-9_]{0,32}", ErrInvalidConfig, c.TablePrefix)
	}
	if c.MaxOpenConns < 0 {
		return fmt.Errorf("%w: MaxOpenConns is negative", ErrInvalidConfig)
	}
	if c.PollInterval < 0 {
		return fmt.Errorf("%w: PollInterval is negative", ErrInvalidConfig)
	}
	if c.MaxOverrides < 0 {
		return fmt.Errorf("%w: MaxOverrides is negative", ErrInvalidConfig)
	}
	return nil
}

// Store is the MySQL implementation of store.Store and store.Watcher.
type Store struct {
	*sqlstore.DB
	poll time.Duration
	log  *slog.Logger
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Watcher = (*Store)(nil)
)

var dialect = sqlstore.Dialect{
	Name:                  "store/mysql",
	Schema:                schema,
	InsertNamespaceIgnore: "INSERT IGNORE INTO {p}namespaces (id, workspace, name, created_at) VALUES (?, ?, ?, ?)",
	UpsertOverride: "INSERT INTO {p}overrides (id, workspace, namespace_id, identifier, lim, duration_ms, created_at, updated_at) " +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE " +
		"lim = VALUES(lim), duration_ms = VALUES(duration_ms), updated_at = VALUES(updated_at)",
	Unavailable: unavailable,
}

// unavailable reports the driver's errors that mean the server cannot be
// used now: a broken connection, too many connections, a server shutting
// down.
func unavailable(err error) bool {
	if errors.Is(err, driver.ErrInvalidConn) {
		return true
	}
	var me *driver.MySQLError
	return errors.As(err, &me) && (me.Number == 1040 || me.Number == 1053)
}

// Open connects, applies the schema and returns the store.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TablePrefix == "" {
		cfg.TablePrefix = DefaultTablePrefix
	}
	if cfg.MaxOpenConns == 0 {
		cfg.MaxOpenConns = 8
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	db, err := sql.Open("mysql", cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("store/mysql: open: %w", err)
	}
	db.SetMaxOpenConns(cfg.MaxOpenConns)
	db.SetMaxIdleConns(cfg.MaxOpenConns)
	db.SetConnMaxLifetime(5 * time.Minute)
	s, err := sqlstore.Open(ctx, db, dialect, cfg.TablePrefix, cfg.MaxOverrides)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &Store{DB: s, poll: cfg.PollInterval, log: cfg.Logger}, nil
}

// Watch implements store.Watcher by polling the version row every
// PollInterval. It calls changed after the first successful read, whenever
// the version differs from the last one read, and after reads recover from
// a failure. It returns nil when ctx is done.
func (s *Store) Watch(ctx context.Context, changed func()) error {
	t := time.NewTicker(s.poll)
	defer t.Stop()
	var last int64
	known, failing := false, false
	for {
		rctx, cancel := context.WithTimeout(ctx, max(s.poll, time.Second))
		v, err := s.Version(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if !failing {
				s.log.Warn("store/mysql: reading the change marker failed; changes are seen on the periodic refresh meanwhile", "err", err)
			}
			failing = true
		case !known || v != last || failing:
			if failing {
				s.log.Info("store/mysql: reading the change marker works again")
			}
			known, failing, last = true, false, v
			changed()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
