package mysql

import (
	"errors"
	"strings"
	"time"
)

// clockExpr is the database clock in microseconds since the Unix epoch,
// computed from UTC_TIMESTAMP so that no time zone takes part.
const clockExpr = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

// errNoClock reports a read whose answer lacks the row that carries the
// database clock, which every read's statement returns.
var errNoClock = errors.New("global/mysql: the read returned no clock row")

// The reads (a pull, a read of denials, or both at once) are one statement
// each, a UNION ALL of parts whose rows share one shape, told apart by
// their first column (a rowKind): a, b, c, d, e, f, g, h, region,
// expires_at, page_rows, page_last. A batch row carries its payload in a
// and its cells in f; a denial row its workspace, namespace, identifier,
// duration_ms and seq in a to e, and its limit and usage in f and g; the
// one clock row the clock in f and the number of other recent regions in
// g. The clock is UTC_TIMESTAMP of the statement, the time it started, so
// no row the statement misses has a later changed_at or created_at than
// the clock.
//
// A pull reads the batch rows written after its cursor, every region's:
// the caller keeps the highest count of each (cell, region). From a recent
// cursor (see Store.pullStatement) it reads every such row still active
// (readBatches); from an older one, a page (readPage): the rows written
// after the cursor, in the order of the changed_at index, up to a page of
// them (see Store.pageBatches), with, in page_rows and page_last, 1 and
// when each was written (the caller leaves out those expired at now): a
// full page leaves rows for the next pull. Both statements read the
// changed_at index (FORCE INDEX: left to itself on a table of millions of
// rows, MariaDB 10.11 read the whole table when its statistics lagged
// behind it).
const (
	// readBatches takes cursor, now.
	readBatches = `SELECT 1, payload, NULL, NULL, NULL, NULL, cells, NULL, region, expires_at, NULL, NULL
FROM {p}batches FORCE INDEX ({p}batches_changed_at) WHERE changed_at > ? AND expires_at > ?`
	// readPage takes cursor, the page's rows.
	readPage = `(SELECT 1, payload, NULL, NULL, NULL, NULL, cells, NULL, region, expires_at, 1,
  TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', changed_at)
FROM {p}batches FORCE INDEX ({p}batches_changed_at) WHERE changed_at > ? ORDER BY changed_at LIMIT ?)`
	// readDenialRows takes cursor, now, region.
	readDenialRows = `SELECT 2, workspace, namespace, identifier, duration_ms, seq, lim, usage_count, region, expires_at, NULL, NULL
FROM {p}blocklist WHERE created_at > ? AND expires_at > ? AND region <> ?`
	// readClockRegions takes now - activeFor, region.
	readClockRegions = `SELECT 3, NULL, NULL, NULL, NULL, NULL, ` + clockExpr +
		`, (SELECT COUNT(*) FROM {p}regions FORCE INDEX ({p}regions_last_seen) WHERE last_seen > ? AND region <> ?), NULL, NULL, NULL, NULL`
	readClock = `SELECT 3, NULL, NULL, NULL, NULL, NULL, ` + clockExpr + `, 0, NULL, NULL, NULL, NULL`
)

// On a read replica the clock row carries the witness (witnessExpr)
// instead of the server's clock; see Config.ReadDSN and read.bound.
//
// The witness is the newest instant of the primary's clock that the
// replica shows: the latest changed_at of a batch row or created_at of a
// denial row, in microseconds since the epoch, 0 while both tables are
// empty. Every row is stamped with UTC_TIMESTAMP(6) of the primary's
// statement that wrote it, its start, and a replica shows the primary's
// transactions in the primary's commit order, so a row the replica does
// not show yet committed after the witness's statement started: it
// started, and so changed, after the witness minus CursorOverlap (no
// statement takes longer than that from its start to its commit). Both
// MAX are read from the end of their index, in the statement's one InnoDB
// read view, the one the rows are read in.
const (
	witnessExpr = `GREATEST(
  COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', (SELECT MAX(changed_at) FROM {p}batches)), 0),
  COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', (SELECT MAX(created_at) FROM {p}blocklist)), 0))`
	// readWitnessRegions takes now - activeFor, region.
	readWitnessRegions = `SELECT 3, NULL, NULL, NULL, NULL, NULL, ` + witnessExpr +
		`, (SELECT COUNT(*) FROM {p}regions FORCE INDEX ({p}regions_last_seen) WHERE last_seen > ? AND region <> ?), NULL, NULL, NULL, NULL`
	readWitness = `SELECT 3, NULL, NULL, NULL, NULL, NULL, ` + witnessExpr + `, 0, NULL, NULL, NULL, NULL`
)

// rowKind tells the parts of a read apart.
type rowKind int

const (
	kindBatch rowKind = iota + 1
	kindDenial
	kindClock
)

// queries holds the store's statements with the table prefix applied.
type queries struct {
	announce                     string
	batches, denials             batchInsert
	primary, replica             reads // the reads on the primary, on a replica
	deleteBatches, deleteDenials string
	deleteLegacy                 string // the expired rows of the earlier releases' counters table
	compaction                   compactionQueries
}

// reads are the read statements of one server, the primary or a replica:
// they differ only in their clock row (the clock or the witness).
type reads struct {
	pull, pullPage string // Pull: every batch row written since the cursor, or a page
	both, bothPage string // PullWithDenials: the same with the denials
	denials        string // Denials
	// witness tells the statements of a replica, whose clock row is the
	// witness.
	witness bool
}

// batchInsert is a multi-row INSERT: head, then row repeated once per row
// (comma-separated), then tail.
type batchInsert struct {
	head, row, tail string
}

// statement returns the INSERT of n rows.
func (b batchInsert) statement(n int) string {
	var sb strings.Builder
	sb.Grow(len(b.head) + n*(len(b.row)+1) + len(b.tail))
	sb.WriteString(b.head)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(b.row)
	}
	sb.WriteString(b.tail)
	return sb.String()
}

func newQueries(prefix string) queries {
	r := strings.NewReplacer("{p}", prefix)
	return queries{
		announce: r.Replace("INSERT INTO {p}regions (region, last_seen) VALUES (?, ?) " +
			"ON DUPLICATE KEY UPDATE last_seen = GREATEST(last_seen, VALUES(last_seen))"),
		batches: batchInsert{
			head: r.Replace("INSERT INTO {p}batches (region, cells, payload, expires_at, level, changed_at) VALUES "),
			row:  "(?, ?, ?, ?, 0, UTC_TIMESTAMP(6))",
		},
		// The no-op update keeps the first row; unlike INSERT IGNORE it
		// does not turn other errors into warnings.
		denials: batchInsert{
			head: r.Replace("INSERT INTO {p}blocklist (id_hash, duration_ms, seq, workspace, namespace, identifier, lim, usage_count, region, expires_at, created_at) VALUES "),
			row:  "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))",
			tail: " ON DUPLICATE KEY UPDATE seq = seq",
		},
		primary:       newReads(r, readClock, readClockRegions, false),
		replica:       newReads(r, readWitness, readWitnessRegions, true),
		deleteBatches: r.Replace("DELETE FROM {p}batches WHERE expires_at <= ? LIMIT ?"),
		deleteLegacy:  r.Replace("DELETE FROM {p}counters WHERE expires_at <= ? LIMIT ?"),
		compaction:    newCompactionQueries(r),
		deleteDenials: r.Replace("DELETE FROM {p}blocklist WHERE expires_at <= ? LIMIT ?"),
	}
}

// newReads returns the read statements whose clock row is clock (the
// denials alone) or clockRegions (with the regions), the witness's if
// witness.
func newReads(r *strings.Replacer, clock, clockRegions string, witness bool) reads {
	return reads{
		pull:     r.Replace(readBatches + " UNION ALL " + clockRegions),
		pullPage: r.Replace(readPage + " UNION ALL " + clockRegions),
		both:     r.Replace(readBatches + " UNION ALL " + readDenialRows + " UNION ALL " + clockRegions),
		bothPage: r.Replace(readPage + " UNION ALL " + readDenialRows + " UNION ALL " + clockRegions),
		denials:  r.Replace(readDenialRows + " UNION ALL " + clock),
		witness:  witness,
	}
}

// cursorTime returns the DATETIME(6) literal of a cursor (microseconds of
// the database clock since the epoch, UTC); below 0 it is the epoch.
func cursorTime(c int64) string {
	return time.UnixMicro(max(c, 0)).UTC().Format("2006-01-02 15:04:05.000000")
}
