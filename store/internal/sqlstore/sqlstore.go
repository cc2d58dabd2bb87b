// Package sqlstore implements store.Store over database/sql for the SQL
// dialects Sluice supports (SQLite and MySQL/MariaDB). The dialect packages
// provide the schema and the few statements that differ.
//
// Every write runs in one transaction that first increments the single row
// of the {p}version table, so [DB.Version] is a change marker that other
// nodes can poll cheaply (store/mysql does), and so that writers queue on
// that row: the bound on the overrides of a namespace, checked inside the
// transaction, holds however many nodes write at once.
package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/store"
)

// Dialect holds the statements that differ between databases. Every
// statement may contain {p}, replaced by the table prefix.
type Dialect struct {
	// Name prefixes errors, e.g. "store/sqlite".
	Name string
	// Schema is run once by Open, statement by statement (split at ";\n").
	// It creates {p}namespaces, {p}overrides and {p}version, and inserts the
	// version row (id 1) unless it exists.
	Schema string
	// InsertNamespaceIgnore inserts (id, workspace, name, created_at) unless
	// (workspace, name) exists.
	InsertNamespaceIgnore string
	// UpsertOverride inserts (id, workspace, namespace_id, identifier, lim,
	// duration_ms, created_at, updated_at) or, when (namespace_id,
	// identifier) exists, replaces lim, duration_ms and updated_at only.
	UpsertOverride string
	// Unavailable, if set, reports driver-specific errors that mean the
	// database cannot be reached or cannot serve now (beyond the generic
	// connection errors every dialect shares).
	Unavailable func(error) bool
}

// DB is a store.Store over one *sql.DB.
type DB struct {
	db           *sql.DB
	d            Dialect
	q            queries
	maxOverrides int
	closeOnce    sync.Once
	closeErr     error
	now          func() time.Time
}

type queries struct {
	insertNS, nsByID, nsByName, allNS          string
	upsertOverride, override, list, del, allOv string
	nsOwned, overrideExists, countOverrides    string
	bump, version                              string
}

// Open runs the schema on db and returns a store over it that holds at most
// maxOverrides overrides per namespace (store.DefaultMaxOverrides if 0).
// The store owns db: Close closes it.
func Open(ctx context.Context, db *sql.DB, d Dialect, prefix string, maxOverrides int) (*DB, error) {
	if maxOverrides < 0 {
		return nil, fmt.Errorf("%s: the bound on overrides %d is negative", d.Name, maxOverrides)
	}
	if maxOverrides == 0 {
		maxOverrides = store.DefaultMaxOverrides
	}
	r := strings.NewReplacer("{p}", prefix)
	for _, stmt := range strings.Split(r.Replace(d.Schema), ";\n") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("%s: schema: %w", d.Name, err)
		}
	}
	const ovCols = "id, workspace, namespace_id, identifier, lim, duration_ms, created_at, updated_at"
	q := queries{
		insertNS: r.Replace(d.InsertNamespaceIgnore),
		nsByID:   r.Replace("SELECT id, workspace, name, created_at FROM {p}namespaces WHERE workspace = ? AND id = ?"),
		nsByName: r.Replace("SELECT id, workspace, name, created_at FROM {p}namespaces WHERE workspace = ? AND name = ?"),
		allNS:    r.Replace("SELECT id, workspace, name, created_at FROM {p}namespaces"),

		upsertOverride: r.Replace(d.UpsertOverride),
		override:       r.Replace("SELECT " + ovCols + " FROM {p}overrides WHERE workspace = ? AND namespace_id = ? AND identifier = ?"),
		list:           r.Replace("SELECT " + ovCols + " FROM {p}overrides WHERE workspace = ? AND namespace_id = ? AND identifier > ? ORDER BY identifier LIMIT ?"),
		del:            r.Replace("DELETE FROM {p}overrides WHERE workspace = ? AND namespace_id = ? AND identifier = ?"),
		allOv:          r.Replace("SELECT " + ovCols + " FROM {p}overrides"),
		nsOwned:        r.Replace("SELECT COUNT(*) FROM {p}namespaces WHERE workspace = ? AND id = ?"),
		overrideExists: r.Replace("SELECT COUNT(*) FROM {p}overrides WHERE namespace_id = ? AND identifier = ?"),
		countOverrides: r.Replace("SELECT COUNT(*) FROM {p}overrides WHERE namespace_id = ?"),

		bump:    r.Replace("UPDATE {p}version SET version = version + 1 WHERE id = 1"),
		version: r.Replace("SELECT version FROM {p}version WHERE id = 1"),
	}
	return &DB{db: db, d: d, q: q, maxOverrides: maxOverrides, now: time.Now}, nil
}

// wrap prefixes err with the dialect and op; connection-class errors also
// wrap store.ErrUnavailable. store.ErrNotFound is returned as is.
func (s *DB) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return err
	}
	if s.unavailable(err) {
		return fmt.Errorf("%s: %s: %w: %w", s.d.Name, op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %s: %w", s.d.Name, op, err)
}

// unavailable reports whether err means the database could not be reached
// or could not serve: a lost or refused connection or a timeout. A caller's
// cancellation is not an outage.
func (s *DB) unavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &ne):
		return true
	}
	return s.d.Unavailable != nil && s.d.Unavailable(err)
}

// write runs fn in a transaction that first increments the version row (so
// concurrent writers queue on that row rather than deadlock elsewhere). fn
// returns whether it changed anything; if not, or on error, the transaction
// is rolled back and the version stays.
func (s *DB) write(ctx context.Context, fn func(tx *sql.Tx) (changed bool, err error)) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, s.q.bump); err != nil {
		return err
	}
	changed, err := fn(tx)
	if err != nil || !changed {
		return err
	}
	return tx.Commit()
}

// Version returns the change marker: a number that every committed write
// increases. Equal versions mean equal contents.
func (s *DB) Version(ctx context.Context) (int64, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, s.q.version).Scan(&v)
	return v, s.wrap("version", err)
}

type scanner interface{ Scan(...any) error }

func scanNS(r scanner) (store.Namespace, error) {
	var ns store.Namespace
	var created int64
	if err := r.Scan(&ns.ID, &ns.Workspace, &ns.Name, &created); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return ns, store.ErrNotFound
		}
		return ns, err
	}
	ns.CreatedAt = time.UnixMilli(created)
	return ns, nil
}

func scanOverride(r scanner) (store.Override, error) {
	var o store.Override
	var durMS, created, updated int64
	if err := r.Scan(&o.ID, &o.Workspace, &o.NamespaceID, &o.Identifier, &o.Limit, &durMS, &created, &updated); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return o, store.ErrNotFound
		}
		return o, err
	}
	o.Duration = time.Duration(durMS) * time.Millisecond
	o.CreatedAt = time.UnixMilli(created)
	o.UpdatedAt = time.UnixMilli(updated)
	return o, nil
}

// EnsureNamespace implements store.Store.
func (s *DB) EnsureNamespace(ctx context.Context, workspace, name string) (store.Namespace, error) {
	err := s.write(ctx, func(tx *sql.Tx) (bool, error) {
		res, err := tx.ExecContext(ctx, s.q.insertNS, store.NewID(store.NamespaceIDPrefix), workspace, name, s.now().UnixMilli())
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		return n > 0, err
	})
	if err != nil {
		return store.Namespace{}, s.wrap("ensure namespace", err)
	}
	ns, err := scanNS(s.db.QueryRowContext(ctx, s.q.nsByName, workspace, name))
	return ns, s.wrap("ensure namespace", err)
}

// Namespace implements store.Store.
func (s *DB) Namespace(ctx context.Context, workspace, idOrName string) (store.Namespace, error) {
	ns, err := scanNS(s.db.QueryRowContext(ctx, s.q.nsByID, workspace, idOrName))
	if errors.Is(err, store.ErrNotFound) {
		ns, err = scanNS(s.db.QueryRowContext(ctx, s.q.nsByName, workspace, idOrName))
	}
	return ns, s.wrap("namespace", err)
}

// SetOverride implements store.Store: in one transaction, it checks that
// the namespace is the workspace's and that a new override fits under the
// bound, then writes.
func (s *DB) SetOverride(ctx context.Context, o store.Override) (store.Override, error) {
	now := s.now().UnixMilli()
	err := s.write(ctx, func(tx *sql.Tx) (bool, error) {
		if err := s.admitOverride(ctx, tx, o); err != nil {
			return false, err
		}
		_, err := tx.ExecContext(ctx, s.q.upsertOverride, store.NewID(store.OverrideIDPrefix), o.Workspace, o.NamespaceID,
			o.Identifier, o.Limit, o.Duration.Milliseconds(), now, now)
		return err == nil, err
	})
	if err != nil {
		return store.Override{}, s.wrap("set override", err)
	}
	got, err := s.Override(ctx, o.Workspace, o.NamespaceID, o.Identifier)
	return got, s.wrap("set override", err)
}

// admitOverride returns store.ErrNotFound unless o's namespace is its
// workspace's, and a *store.LimitError if o is a new override of a
// namespace that already holds maxOverrides. It runs inside the write's
// transaction, after the version row was incremented: every other writer
// waits on that row, so the count cannot change before the commit.
func (s *DB) admitOverride(ctx context.Context, tx *sql.Tx, o store.Override) error {
	var owned, exists, count int
	if err := tx.QueryRowContext(ctx, s.q.nsOwned, o.Workspace, o.NamespaceID).Scan(&owned); err != nil {
		return err
	}
	if owned == 0 {
		return store.ErrNotFound
	}
	if err := tx.QueryRowContext(ctx, s.q.overrideExists, o.NamespaceID, o.Identifier).Scan(&exists); err != nil || exists > 0 {
		return err
	}
	if err := tx.QueryRowContext(ctx, s.q.countOverrides, o.NamespaceID).Scan(&count); err != nil {
		return err
	}
	if count >= s.maxOverrides {
		return &store.LimitError{Bound: store.BoundOverrides, Max: s.maxOverrides}
	}
	return nil
}

// Override implements store.Store.
func (s *DB) Override(ctx context.Context, workspace, namespaceID, identifier string) (store.Override, error) {
	o, err := scanOverride(s.db.QueryRowContext(ctx, s.q.override, workspace, namespaceID, identifier))
	return o, s.wrap("override", err)
}

// ListOverrides implements store.Store.
func (s *DB) ListOverrides(ctx context.Context, workspace, namespaceID, after string, limit int) ([]store.Override, error) {
	rows, err := s.db.QueryContext(ctx, s.q.list, workspace, namespaceID, after, limit)
	if err != nil {
		return nil, s.wrap("list overrides", err)
	}
	defer rows.Close()
	var out []store.Override
	for rows.Next() {
		o, err := scanOverride(rows)
		if err != nil {
			return nil, s.wrap("list overrides", err)
		}
		out = append(out, o)
	}
	return out, s.wrap("list overrides", rows.Err())
}

// DeleteOverride implements store.Store.
func (s *DB) DeleteOverride(ctx context.Context, workspace, namespaceID, identifier string) error {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) (bool, error) {
		res, err := tx.ExecContext(ctx, s.q.del, workspace, namespaceID, identifier)
		if err != nil {
			return false, err
		}
		n, err = res.RowsAffected()
		return n > 0, err
	})
	if err != nil {
		return s.wrap("delete override", err)
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// Snapshot implements store.Store.
func (s *DB) Snapshot(ctx context.Context) (store.Snapshot, error) {
	var snap store.Snapshot
	rows, err := s.db.QueryContext(ctx, s.q.allNS)
	if err != nil {
		return snap, s.wrap("snapshot", err)
	}
	for rows.Next() {
		ns, err := scanNS(rows)
		if err != nil {
			rows.Close()
			return snap, s.wrap("snapshot", err)
		}
		snap.Namespaces = append(snap.Namespaces, ns)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return snap, s.wrap("snapshot", err)
	}
	rows, err = s.db.QueryContext(ctx, s.q.allOv)
	if err != nil {
		return snap, s.wrap("snapshot", err)
	}
	defer rows.Close()
	for rows.Next() {
		o, err := scanOverride(rows)
		if err != nil {
			return snap, s.wrap("snapshot", err)
		}
		snap.Overrides = append(snap.Overrides, o)
	}
	return snap, s.wrap("snapshot", rows.Err())
}

// Ping implements store.Store.
func (s *DB) Ping(ctx context.Context) error { return s.wrap("ping", s.db.PingContext(ctx)) }

// Close implements store.Store; it is idempotent.
func (s *DB) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.db.Close() })
	return s.closeErr
}

// Exec runs a statement with {p} replaced by prefix; tests use it to drop
// their own tables.
func (s *DB) Exec(ctx context.Context, stmt, prefix string) error {
	_, err := s.db.ExecContext(ctx, strings.ReplaceAll(stmt, "{p}", prefix))
	return err
}
