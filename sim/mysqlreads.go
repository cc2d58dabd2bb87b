package sim

import (
	"sort"
	"sync"

	"github.com/sluicehq/sluice/global"
)

// The MySQL store's pulls, as global/mysql makes them: a pull reads every
// row (a region's entry of a cell) changed since its cursor less an
// overlap, not only the rows changed since the last pull (the in-process
// store the simulation runs on returns those alone). Most pulls are recent and read from the
// last pull's clock less mysqlRecentOverlap; a whole pull, every
// mysqlCursorOverlap, reads from the last whole pull's clock less
// mysqlCursorOverlap; a leader's first pull reads every active change.
const (
	mysqlCursorOverlap = 5_000 // ms: global/mysql.DefaultCursorOverlap
	mysqlRecentOverlap = 1_000 // ms: global/mysql's recentOverlap
)

// changeLog is what the simulated MySQL store's pulls would read: the rows
// that changed, in the order of the time they changed, and each region's
// last pulls, so that a pull counts the rows a MySQL pull would read at
// that point (see readRows).
type changeLog struct {
	mu      sync.Mutex
	changes []rowChange // oldest first; those older than any pull reads dropped
	pulls   map[string]pullMarks
	seen    map[global.Entry]struct{} // readRows' scratch
}

// rowChange is a region's row of a cell that changed at at (ms of the
// virtual clock).
type rowChange struct {
	at, expiresAt int64
	row           global.Entry // the cell and the region
}

// pullMarks are a region's last pull and last whole pull (ms).
type pullMarks struct {
	last, whole int64
}

// add records region's rows of the cells of counts, with a positive count,
// as changed at now.
func (l *changeLog) add(now int64, region string, counts []global.Count) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range counts {
		if c.Count > 0 {
			l.changes = append(l.changes, rowChange{at: now, expiresAt: c.ExpiresAt, row: global.Entry{Cell: c.Cell, Region: region}})
		}
	}
}

// readRows returns how many rows a pull of region at now reads: the
// distinct rows changed after the pull's starting point and active at now.
// It drops the changes no pull can read again.
func (l *changeLog) readRows(region string, now int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pulls == nil {
		l.pulls, l.seen = map[string]pullMarks{}, map[global.Entry]struct{}{}
	}
	from := int64(-1 << 62) // a first pull reads every active change
	m, ok := l.pulls[region]
	switch {
	case ok && now >= m.whole && now-m.whole < mysqlCursorOverlap:
		from = m.last - mysqlRecentOverlap
		m.last = now
	case ok:
		from = m.whole - mysqlCursorOverlap
		m = pullMarks{last: now, whole: now}
	default:
		m = pullMarks{last: now, whole: now}
	}
	l.pulls[region] = m
	i := sort.Search(len(l.changes), func(i int) bool { return l.changes[i].at > from })
	clear(l.seen)
	for _, c := range l.changes[i:] {
		if c.at <= now && c.expiresAt > now {
			l.seen[c.row] = struct{}{}
		}
	}
	l.trim(now)
	return len(l.seen)
}

// trim drops the changes older than any region's next pull reads from
// (whole pulls read back 2 × mysqlCursorOverlap at most), once they are a
// good share of the log.
func (l *changeLog) trim(now int64) {
	keep := now - 3*mysqlCursorOverlap
	i := sort.Search(len(l.changes), func(i int) bool { return l.changes[i].at > keep })
	if i > len(l.changes)/2 {
		l.changes = append(l.changes[:0], l.changes[i:]...)
	}
}
