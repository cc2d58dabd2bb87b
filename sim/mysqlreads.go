package sim

import (
	"container/heap"
	"math"
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

// changeLog is what the simulated MySQL store's reads would read: the
// batch rows and the denial rows written, each in the order of the time
// they were written, and each region's last reads of each, so that a read
// counts the rows a MySQL read would read at that point (see readRows).
type changeLog struct {
	mu      sync.Mutex
	batches rowLog
	denials rowLog
	// expiring holds the batch rows written, by expiry, until a cleanup
	// deletes them (see expired).
	expiring expiryHeap
}

// rowLog is one table's rows as its reads see them: the rows written,
// oldest first (those older than any read reads dropped), and each
// region's last reads.
type rowLog struct {
	written []rowsWritten
	reads   map[string]pullMarks
}

// rowsWritten is rows rows written at at (ms of the virtual clock), the
// last of their cells expiring at expiresAt.
type rowsWritten struct {
	at, expiresAt int64
	rows          int
}

// pullMarks are a region's last read and last whole read (ms).
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
	l.batches.written = append(l.batches.written, w)
	heap.Push(&l.expiring, w)
}

// expired returns how many batch rows expired by now that no cleanup
// deleted yet, and forgets them: what a cleanup at now deletes.
func (l *changeLog) expired(now int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for len(l.expiring) > 0 && l.expiring[0].expiresAt <= now {
		n += heap.Pop(&l.expiring).(rowsWritten).rows
	}
	return n
}

// expiryHeap is a min-heap of rows written by expiry (container/heap).
type expiryHeap []rowsWritten

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expiresAt < h[j].expiresAt }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(rowsWritten)) }
func (h *expiryHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}

// addDenials records n denial rows as written at now. A read of denials
// counts the rows of its range whatever their expiry.
func (l *changeLog) addDenials(now int64, n int) {
	if n == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.denials.written = append(l.denials.written, rowsWritten{at: now, expiresAt: math.MaxInt64, rows: n})
}

// readRows returns how many batch rows a pull of region at now reads (see
// rowLog.read).
func (l *changeLog) readRows(region string, now int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.batches.read(region, now)
}

// readDenialRows returns how many denial rows a read of denials by region
// at now reads (see rowLog.read): the store moves a read of denials as it
// does a pull.
func (l *changeLog) readDenialRows(region string, now int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.denials.read(region, now)
}

// read returns how many rows a read of region at now reads: the rows
// written after its starting point (see nextRead) and active at now. It
// drops the rows no read can read again.
func (g *rowLog) read(region string, now int64) int {
	if g.reads == nil {
		g.reads = map[string]pullMarks{}
	}
	from := nextRead(g.reads, region, now)
	i := sort.Search(len(g.written), func(i int) bool { return g.written[i].at > from })
	n := 0
	for _, w := range g.written[i:] {
		if w.at <= now && w.expiresAt > now {
			n += w.rows
		}
	}
	g.trim(now)
	return n
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

// trim drops the rows older than any region's next read reads from
// (whole reads read back 2 × mysqlCursorOverlap at most), once they are a
// good share of the log.
func (g *rowLog) trim(now int64) {
	keep := now - 3*mysqlCursorOverlap
	i := sort.Search(len(g.written), func(i int) bool { return g.written[i].at > keep })
	if i > len(g.written)/2 {
		g.written = append(g.written[:0], g.written[i:]...)
	}
}
