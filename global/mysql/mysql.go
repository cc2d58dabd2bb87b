// Package mysql is the MySQL/MariaDB implementation of [global.Store], the
// record through which the regions of one deployment converge.
//
// Counts are G-Counter entries, a count per (cell, region), stored packed:
// each Publish appends rows that carry many cells' counts of its region
// (Config.ChunkRows a row), nothing is updated in place, and a reader keeps
// the highest count of each entry it reads. Rows written and rows read so
// grow with the rounds of the regions, not with their cells.
// Denials are one row per cell, the first insert winning. Reads are
// incremental: a cursor is the database's own clock, minus a safety overlap.
// Reads may go to a read replica (Config.ReadDSN), writes always go to the
// primary; there a cursor is bounded by the newest row the replica shows, so
// a lagging replica delays rows but never makes a read skip one.
// Cleanup deletes expired rows in bounded batches under a named lock, one
// node at a time, and merges the old rows of long windows into fewer. Every call goes through a circuit breaker; an open breaker
// fails calls at once with an error wrapping [global.ErrUnavailable].
//
// The schema is created and migrated by [New] from embedded, versioned
// migrations, under a named lock so that many nodes may start at once.
// docs/global-mysql.md describes the schema and the queries.
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	driver "github.com/go-sql-driver/mysql"
	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/internal/breaker"
)

// Errors of this package. Outage-class errors (breaker open, timeout,
// connection failure, closed store) also wrap [global.ErrUnavailable].
var (
	// ErrClosed is returned by calls made after [Store.Close].
	ErrClosed = errors.New("global/mysql: store is closed")
	// ErrInvalidInput is returned, wrapped with the reason, for what the
	// store cannot record exactly: a duration that is not a positive whole
	// number of milliseconds, a field longer than MaxFieldBytes, a region
	// longer than MaxRegionBytes, a cleanup batch under 1. A call's region
	// or batch fails the call before anything is sent; a cell or denial is
	// left out while the rest of its call is written (one long identifier
	// must not stop a region's convergence).
	ErrInvalidInput = errors.New("global/mysql: invalid input")
	// ErrMigration is returned by New when the schema cannot be brought up
	// to date.
	ErrMigration = errors.New("global/mysql: migration failed")
)

// Store is a [global.Store] on MySQL or MariaDB. Create it with [New] or
// [Open]; the zero value is not usable. A Store is safe for concurrent use
// and starts no goroutine of its own.
type Store struct {
	db      *sql.DB
	ownsDB  bool
	replica *sql.DB // Config.ReadDSN's pool, or nil
	reads   *sql.DB // where the reads go: replica, or db
	rq      reads   // the read statements for reads
	// stuck is the cursor from which the next pull on a replica reads
	// every change (see pulled), or -1.
	stuck    atomic.Int64
	recent   recentReads // the pulls made, for the next one (see recentReads)
	denied   recentReads // the reads of denials made, for the next one
	cfg      Config
	q        queries
	cleanup  string // GET_LOCK name of Cleanup
	log      *slog.Logger
	obs      Observer
	breaker  *gobreaker.CircuitBreaker[struct{}]
	closed   atomic.Bool
	closeErr error
	once     sync.Once
}

var _ global.Store = (*Store)(nil)

// New returns a Store on db, after [Config.Validate] and after bringing the
// schema up to date (see the package doc). The caller keeps owning db:
// Close does not close it. db must be a go-sql-driver/mysql pool; [Open]
// makes one with the options the store relies on. With Config.ReadDSN, New
// also opens the replica's pool (lazily: no connection is made until the
// first read), which the Store owns.
func New(ctx context.Context, db *sql.DB, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ms, err := loadMigrations(migrations)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMigration, err)
	}
	if _, err := migrate(ctx, db, cfg.TablePrefix, ms, cfg.MigrationWait, cfg.Logger); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMigration, err)
	}
	var database sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&database); err != nil {
		return nil, fmt.Errorf("global/mysql: %w", err)
	}
	s := &Store{
		db:      db,
		reads:   db,
		cfg:     cfg,
		q:       newQueries(cfg.TablePrefix),
		cleanup: lockName(database.String, cfg.TablePrefix, "cleanup"),
		log:     cfg.Logger,
		obs:     cfg.Observer,
	}
	s.rq = s.q.primary
	s.stuck.Store(-1)
	if cfg.ReadDSN != "" {
		if s.replica, err = openPool(cfg.ReadDSN, cfg.Logger); err != nil {
			return nil, fmt.Errorf("global/mysql: read DSN: %w", err)
		}
		s.reads, s.rq = s.replica, s.q.replica
		s.log.Info("global/mysql: reads go to a read replica; writes to the primary")
	}
	s.breaker = newBreaker(cfg.Breaker, s.log, s.obs)
	return s, nil
}

// Open connects to dsn (a go-sql-driver/mysql DSN) and returns [New]'s Store
// on a pool of at most 8 connections; the Store owns the pool and Close
// closes it. Open sets the driver
// options the store relies on unless dsn sets them: interpolateParams=true
// (one round trip per statement), a 5s dial timeout, 30s read and write
// timeouts as a backstop behind contexts, and innodb_lock_wait_timeout=2 to
// bound how long a write can wait for a row lock (see Config.CursorOverlap).
// The driver's own messages (broken connections, which calls also return as
// errors) go to Config.Logger at Debug level instead of standard error.
func Open(ctx context.Context, dsn string, cfg Config) (*Store, error) {
	db, err := openPool(dsn, cfg.withDefaults().Logger)
	if err != nil {
		return nil, fmt.Errorf("%w: DSN: %w", ErrInvalidConfig, err)
	}
	s, err := New(ctx, db, cfg)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	s.ownsDB = true
	return s, nil
}

// openPool returns a pool of at most 8 connections on dsn with the driver
// options Open documents, the driver's messages going to log. It connects
// to nothing yet.
func openPool(dsn string, log *slog.Logger) (*sql.DB, error) {
	dc, err := driver.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	withDriverDefaults(dc)
	dc.Logger = driverLogger{log}
	connector, err := driver.NewConnector(dc)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	db.SetConnMaxLifetime(5 * time.Minute)
	return db, nil
}

// withDriverDefaults sets on dc the options Open documents, where dc leaves
// them unset.
func withDriverDefaults(dc *driver.Config) {
	dc.InterpolateParams = true
	if dc.Timeout == 0 {
		dc.Timeout = 5 * time.Second
	}
	if dc.ReadTimeout == 0 {
		dc.ReadTimeout = 30 * time.Second
	}
	if dc.WriteTimeout == 0 {
		dc.WriteTimeout = 30 * time.Second
	}
	if dc.Params == nil {
		dc.Params = map[string]string{}
	}
	if _, ok := dc.Params["innodb_lock_wait_timeout"]; !ok {
		dc.Params["innodb_lock_wait_timeout"] = "2"
	}
}

// Close marks the Store closed: later calls fail with [ErrClosed] (wrapping
// global.ErrUnavailable) without touching the network. A Store made by
// [Open] also closes its pool, and every Store the pool of Config.ReadDSN.
// Close does not wait for calls in flight; it is idempotent and returns the
// pools' close errors on every call.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		if s.ownsDB {
			s.closeErr = s.db.Close()
		}
		if s.replica != nil {
			s.closeErr = errors.Join(s.closeErr, s.replica.Close())
		}
	})
	return s.closeErr
}

// BreakerState returns the current state of the circuit breaker. An open
// breaker whose OpenTimeout has passed reports (and becomes) half-open.
func (s *Store) BreakerState() BreakerState {
	return breaker.StateOf(s.breaker.State())
}

// driverLogger passes go-sql-driver/mysql's messages to a slog.Logger.
type driverLogger struct{ log *slog.Logger }

func (l driverLogger) Print(v ...any) {
	l.log.Debug("global/mysql: driver: " + fmt.Sprint(v...))
}
