package sim

import (
	"sort"
	"sync"

	"github.com/sluicehq/sluice/global"
)

// The MySQL store's pulls, as global/mysql makes them: a pull reads every
// batch row written since its cursor less an overlap, not only the rows
// written since the last pull (the in-process store the simulation runs on
// returns those alone). Most pulls are recent and read from the last
// pull's clock less mysqlRecentOverlap; a whole pull, every
// mysqlCursorOverlap, reads from the last whole pull's clock less
// mysqlCursorOverlap; a leader's first pull reads every active row.
const (
	mysqlCursorOverlap = 5_000 // ms: global/mysql.DefaultCursorOverlap
	mysqlRecentOverlap = 1_000 // ms: global/mysql's recentOverlap
)

// changeLog is what the simulated MySQL store's pulls would read: the
// batch rows written, in the order of the time they were written, and each
// region's last pulls, so that a pull counts the rows a MySQL pull would
// read at that point (see readRows).
type changeLog struct {
	mu      sync.Mutex
	changes []rowsWritten // oldest first; those older than any pull reads dropped
	pulls   map[string]pullMarks
	// denials holds when each denial row was written, oldest first, and
	// denialReads each region's last read of denials (ms).
	denials     []int64
	denialReads map[string]pullMarks
}

// rowsWritten is a publish's batch rows, written at at (ms of the virtual
// clock), the last of their cells expiring at expiresAt.
type rowsWritten struct {
	at, expiresAt int64
	rows          int
}

// pullMarks are a region's last pull and last whole pull (ms).
type pullMarks struct {
	last, whole int64
}

// add records rows batch rows of the cells of counts as written at now.
func (l *changeLog) add(now int64, counts []global.Count, rows int) {
	if rows == 0 {
		return
	}
	w := rowsWritten{at: now, rows: rows}
	for _, c := range counts {
		w.expiresAt = max(w.expiresAt, c.ExpiresAt)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changes = append(l.changes, w)
}

// readRows returns how many rows a pull of region at now reads: the batch
// rows written after the pull's starting point and active at now. It drops
// the changes no pull can read again.
func (l *changeLog) readRows(region string, now int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pulls == nil {
		l.pulls = map[string]pullMarks{}
	}
	from := nextRead(l.pulls, region, now)
	i := sort.Search(len(l.changes), func(i int) bool { return l.changes[i].at > from })
	n := 0
	for _, c := range l.changes[i:] {
		if c.at <= now && c.expiresAt > now {
			n += c.rows
		}
	}
	l.trim(now)
	return n
}

// addDenials records n denial rows as written at now.
func (l *changeLog) addDenials(now int64, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range n {
		l.denials = append(l.denials, now)
	}
}

// readDenialRows returns how many denial rows a read of denials by region
// at now reads: the rows of every region written since its starting
// point, which the store moves as it does a pull's (see readRows: recent
// reads from the last read less mysqlRecentOverlap, whole ones every
// mysqlCursorOverlap from the last whole read less mysqlCursorOverlap), or
// every row at its first.
func (l *changeLog) readDenialRows(region string, now int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.denialReads == nil {
		l.denialReads = map[string]pullMarks{}
	}
	from := nextRead(l.denialReads, region, now)
	i := sort.Search(len(l.denials), func(i int) bool { return l.denials[i] > from })
	j := sort.Search(len(l.denials), func(j int) bool { return l.denials[j] > now })
	if keep := sort.Search(len(l.denials), func(k int) bool { return l.denials[k] > now-3*mysqlCursorOverlap }); keep > len(l.denials)/2 {
		l.denials = append(l.denials[:0], l.denials[keep:]...)
		i, j = max(i-keep, 0), j-keep
	}
	return j - i
}

// nextRead records a read of region at now in marks and returns where it
// reads from: the last read's time less mysqlRecentOverlap while the last
// whole read is under mysqlCursorOverlap old, else (a whole read) the last
// whole read's less mysqlCursorOverlap, or everything at the first.
func nextRead(marks map[string]pullMarks, region string, now int64) int64 {
	from := int64(-1 << 62)
	m, ok := marks[region]
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
	marks[region] = m
	return from
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
