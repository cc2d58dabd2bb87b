package mysql

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	driver "github.com/go-sql-driver/mysql"
)

// Defaults of [Config] and [BreakerConfig]; a zero field means its default.
const (
	DefaultTablePrefix         = "sluice_global_"
	DefaultTimeout             = 5 * time.Second
	DefaultCursorOverlap       = 5 * time.Second
	DefaultChunkRows           = 500
	DefaultPageRows            = 50_000
	DefaultMigrationWait       = 30 * time.Second
	DefaultConsecutiveFailures = 3
	DefaultOpenTimeout         = 3 * time.Second
	DefaultHalfOpenProbes      = 1
)

// MaxChunkRows bounds Config.ChunkRows: at the longest identities a cell
// takes about 3 KB of a row, so a row stays under 4 MB and its INSERT (the
// payload escaped) under 16 MB, MariaDB's default max_allowed_packet
// (MySQL 8: 64 MB).
const MaxChunkRows = 1000

// MaxPageRows bounds Config.PageRows.
const MaxPageRows = 10_000_000

// Limits of the stored identity, in bytes. Longer fields are rejected with
// [ErrInvalidInput] before anything is sent. They are twice the server's
// limits (255-byte workspaces, 512-byte names).
const (
	MaxFieldBytes  = 1024 // workspace, namespace, identifier
	MaxRegionBytes = 255
)

// ErrInvalidConfig is wrapped by every error of [Config.Validate].
var ErrInvalidConfig = errors.New("global/mysql: invalid config")

var validPrefix = regexp.MustCompile(`^[A-Za-z0-9_]{1,32}$`)

// Config configures a [Store]. Every zero field takes its documented
// default. A Config is a plain value: copy it freely.
type Config struct {
	// TablePrefix prefixes the store's table names (letters, digits, '_';
	// at most 32). Default "sluice_global_": tables sluice_global_batches,
	// sluice_global_blocklist, sluice_global_regions and
	// sluice_global_schema_version. Tests use a unique prefix each.
	TablePrefix string

	// Timeout bounds each call whose context has no deadline (a call's
	// statements together). A caller's own deadline is used as it is.
	// Default 5s.
	Timeout time.Duration

	// CursorOverlap is subtracted from the database clock to make the
	// cursor that Pull and Denials return, so that a row whose statement
	// started before the read but committed after it is still read next
	// time. It must exceed the longest time a write statement can take from
	// its start to its commit (Open sets innodb_lock_wait_timeout to 2s to
	// bound lock waits). Rows changed within the overlap are reported again
	// by the next read. Default 5s; at least 1µs.
	CursorOverlap time.Duration

	// ChunkRows is the number of cells one stored row carries at most
	// (at most MaxChunkRows): a Publish of n cells writes ceil(n /
	// ChunkRows) rows. Default 500.
	ChunkRows int

	// PageRows bounds the cells one Pull reads (at most MaxPageRows), in
	// rows of ChunkRows cells (PageRows / ChunkRows rows, at least one):
	// where more rows were written since the cursor, a Pull reads the
	// oldest of them (and any other row written at the same instant as
	// the last) and returns a cursor at the last, so that the next pulls
	// go on from there, a page each, where one read of them all would
	// outlast Timeout and never move the cursor (a node starting next to
	// a large table, or a backlog after an outage). Default 50,000.
	PageRows int

	// ReadDSN is a go-sql-driver/mysql DSN of a read replica of the
	// primary (the pool given to New, or Open's DSN), for the reads of other
	// regions' rows: Pull, Denials and PullWithDenials read there, while
	// every write (Publish, Announce, EmitDenials, Cleanup) and the
	// migrations go to the primary. New and Open open a pool of at most 8
	// connections on it, with Open's driver options; the Store owns that
	// pool and Close closes it. Default "": every call goes to the primary.
	//
	// A lagging replica delays what a pull reads, never loses it: on a
	// replica, the cursor a read returns is bounded by the newest row the
	// replica shows (every row carries the primary's clock, see Store.Pull)
	// minus CursorOverlap, so it never passes a row that has yet to arrive.
	// The replica must apply the primary's transactions in the primary's
	// commit order (MariaDB's default, with or without parallel
	// replication; MySQL 8.0.27+ by default, replica_preserve_commit_order)
	// and take no writes of its own. Its failures count against the one
	// circuit breaker of the Store.
	ReadDSN string

	// MigrationWait bounds how long New waits for another node's
	// migrations (GET_LOCK). Default 30s.
	MigrationWait time.Duration

	// Breaker configures the circuit breaker around every call.
	Breaker BreakerConfig

	// Logger receives breaker state changes (Warn when it opens, Info
	// otherwise) and applied migrations. nil discards.
	Logger *slog.Logger

	// Observer receives every call's outcome and breaker state changes.
	// nil means [NopObserver].
	Observer Observer
}

// BreakerConfig configures the circuit breaker (sony/gobreaker v2). While
// closed, ConsecutiveFailures failed calls in a row open it. While open,
// calls fail at once with an error wrapping global.ErrUnavailable; after
// OpenTimeout the breaker lets HalfOpenProbes calls through (half-open): if
// they all succeed it closes, if one fails it opens again.
//
// Failures are timeouts, connection errors and the server errors that mean
// an outage (see [OutcomeUnavailable]); a caller's cancellation, invalid
// input and other server errors do not count.
type BreakerConfig struct {
	ConsecutiveFailures uint32        // default 3
	OpenTimeout         time.Duration // open → half-open; default 3s
	HalfOpenProbes      uint32        // default 1
}

// Validate reports whether c can build a [Store]: the prefix must be valid,
// ReadDSN empty or a DSN that parses, and no field negative or out of
// range. Zero fields are valid (they take
// their defaults).
func (c Config) Validate() error {
	var errs []error
	if c.TablePrefix != "" && !validPrefix.MatchString(c.TablePrefix) {
		errs = append(errs, fmt.Errorf("table prefix %q is not [A-Za-z0-9_]{1,32}", c.TablePrefix))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v is negative", c.Timeout))
	}
	if c.CursorOverlap < 0 || (c.CursorOverlap > 0 && c.CursorOverlap < time.Microsecond) {
		errs = append(errs, fmt.Errorf("cursor overlap %v is under 1µs", c.CursorOverlap))
	}
	if c.ChunkRows < 0 || c.ChunkRows > MaxChunkRows {
		errs = append(errs, fmt.Errorf("chunk rows %d is outside [0, %d]", c.ChunkRows, MaxChunkRows))
	}
	if c.PageRows < 0 || c.PageRows > MaxPageRows {
		errs = append(errs, fmt.Errorf("page rows %d is outside [0, %d]", c.PageRows, MaxPageRows))
	}
	if c.ReadDSN != "" {
		if _, err := driver.ParseDSN(c.ReadDSN); err != nil {
			errs = append(errs, fmt.Errorf("read DSN: %w", err))
		}
	}
	if c.MigrationWait < 0 {
		errs = append(errs, fmt.Errorf("migration wait %v is negative", c.MigrationWait))
	}
	if c.Breaker.OpenTimeout < 0 {
		errs = append(errs, fmt.Errorf("breaker open timeout %v is negative", c.Breaker.OpenTimeout))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.TablePrefix == "" {
		c.TablePrefix = DefaultTablePrefix
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.CursorOverlap == 0 {
		c.CursorOverlap = DefaultCursorOverlap
	}
	if c.ChunkRows == 0 {
		c.ChunkRows = DefaultChunkRows
	}
	if c.PageRows == 0 {
		c.PageRows = DefaultPageRows
	}
	if c.MigrationWait == 0 {
		c.MigrationWait = DefaultMigrationWait
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	b := &c.Breaker
	if b.ConsecutiveFailures == 0 {
		b.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if b.OpenTimeout == 0 {
		b.OpenTimeout = DefaultOpenTimeout
	}
	if b.HalfOpenProbes == 0 {
		b.HalfOpenProbes = DefaultHalfOpenProbes
	}
	return c
}
