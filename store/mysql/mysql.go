// Package mysql is the MySQL/MariaDB store of namespaces and overrides,
// shared by every node of a deployment (enabled by --mysql-dsn). Its schema
// is embedded and applied idempotently (CREATE TABLE IF NOT EXISTS) by Open.
package mysql

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/internal/sqlstore"
)

// DefaultTablePrefix prefixes the store's table names.
const DefaultTablePrefix = "sluice_"

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
	return nil
}

// Store is the MySQL implementation of store.Store.
type Store struct {
	*sqlstore.DB
}

var _ store.Store = (*Store)(nil)

var dialect = sqlstore.Dialect{
	Name:                  "store/mysql",
	Schema:                schema,
	InsertNamespaceIgnore: "INSERT IGNORE INTO {p}namespaces (id, workspace, name, created_at) VALUES (?, ?, ?, ?)",
	UpsertOverride: "INSERT INTO {p}overrides (id, workspace, namespace_id, identifier, lim, duration_ms, created_at, updated_at) " +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE " +
		"lim = VALUES(lim), duration_ms = VALUES(duration_ms), updated_at = VALUES(updated_at)",
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
	db, err := sql.Open("mysql", cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("store/mysql: open: %w", err)
	}
	db.SetMaxOpenConns(cfg.MaxOpenConns)
	db.SetMaxIdleConns(cfg.MaxOpenConns)
	db.SetConnMaxLifetime(5 * time.Minute)
	s, err := sqlstore.Open(ctx, db, dialect, cfg.TablePrefix)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &Store{s}, nil
}
