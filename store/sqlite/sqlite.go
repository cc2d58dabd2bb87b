// Package sqlite is the embedded, pure-Go (modernc.org/sqlite) store of
// namespaces and overrides: one database file in the server's data
// directory, for a single node.
package sqlite

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/internal/sqlstore"
)

// FileName is the database file created inside Config.Dir.
const FileName = "sluice.db"

// DefaultTablePrefix prefixes the store's table names.
const DefaultTablePrefix = "sluice_"

// ErrInvalidConfig is returned, wrapped with the reason, by Config.Validate.
var ErrInvalidConfig = errors.New("store/sqlite: invalid config")

//go:embed schema.sql
var schema string

// Config configures the SQLite store.
type Config struct {
	// Dir is the folder that holds the database file; it is created (0700)
	// when missing. Required.
	Dir string
	// TablePrefix prefixes table names. Default DefaultTablePrefix.
	TablePrefix string
	// MaxOverrides bounds the overrides of one namespace: a new override
	// past it fails with a *store.LimitError. Default
	// store.DefaultMaxOverrides.
	MaxOverrides int
}

// Validate reports the first invalid field of c.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return fmt.Errorf("%w: Dir is empty", ErrInvalidConfig)
	case c.MaxOverrides < 0:
		return fmt.Errorf("%w: MaxOverrides is negative", ErrInvalidConfig)
	}
	return nil
}

// Store is the SQLite implementation of store.Store.
type Store struct {
	*sqlstore.DB
}

var _ store.Store = (*Store)(nil)

var dialect = sqlstore.Dialect{
	Name:                  "store/sqlite",
	Schema:                schema,
	InsertNamespaceIgnore: "INSERT INTO {p}namespaces (id, workspace, name, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (workspace, name) DO NOTHING",
	UpsertOverride: "INSERT INTO {p}overrides (id, workspace, namespace_id, identifier, lim, duration_ms, created_at, updated_at) " +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (namespace_id, identifier) DO UPDATE SET " +
		"lim = excluded.lim, duration_ms = excluded.duration_ms, updated_at = excluded.updated_at",
}

// Open creates the directory and the database if needed, applies the schema
// and returns the store.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TablePrefix == "" {
		cfg.TablePrefix = DefaultTablePrefix
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("store/sqlite: data dir: %w", err)
	}
	// A file: URI needs an absolute path: a relative one would be read as
	// the URI's authority ("file://sluice-data/...").
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("store/sqlite: data dir: %w", err)
	}
	path := filepath.Join(dir, FileName)
	dsn := (&url.URL{Scheme: "file", Path: path, RawQuery: "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store/sqlite: open %s: %w", path, err)
	}
	// One connection: SQLite has one writer anyway, and the request path
	// reads the in-memory cache, not the database.
	db.SetMaxOpenConns(1)
	s, err := sqlstore.Open(ctx, db, dialect, cfg.TablePrefix, cfg.MaxOverrides)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &Store{s}, nil
}
