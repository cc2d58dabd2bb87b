package mysql

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/global"
)

// TestLoad measures one deployment's steady load on MariaDB: 10k active
// identities in 3 regions, each region publishing all of them and pulling
// once per round (a round stands for one 5s global interval). It reports
// rows written, statements and mariadbd CPU per round and per second of
// that cadence. Opt-in, bounded to about a minute:
//
//	SLUICE_GLOBAL_LOAD=1 go test -run '^TestLoad$' -v -count=1 ./global/mysql/
func TestLoad(t *testing.T) {
	if os.Getenv("SLUICE_GLOBAL_LOAD") == "" {
		t.Skip("set SLUICE_GLOBAL_LOAD=1 to run the load test")
	}
	const identities, interval = 10_000, 5 * time.Second
	regions := []string{"eu", "us", "ap"}
	prefix := newPrefix(t)
	stats := &loadObserver{}
	stores := make([]*Store, len(regions))
	for i := range regions {
		stores[i] = openStore(t, Config{TablePrefix: prefix, Observer: stats, Timeout: 30 * time.Second})
	}
	pid := mariadbPID()
	if pid == 0 {
		t.Log("mariadbd not found in /proc: CPU is not measured")
	}
	cursors := make([]global.Cursor, len(regions))
	for _, kind := range []struct {
		name   string
		counts []int64 // one round per entry: every region publishes this count for every cell
	}{
		{"insert (first publish)", []int64{1}},
		{"update (every count grows)", []int64{2, 3, 4, 5, 6}},
		{"no change (same counts)", []int64{6, 6, 6}},
	} {
		var pub, pull phase
		for _, c := range kind.counts {
			pub.add(stats, pid, func() { publishAll(t, stores, regions, loadCounts(identities, c)) })
			pull.add(stats, pid, func() { pull.rows += pullAll(t, stores, regions, cursors, interval) })
		}
		n := len(kind.counts)
		t.Logf("%-27s per round (mean of %d): publish %5d rows, %2d statements, %4v wall, mariadbd CPU %4v; pull %5d cells, %d statements, %4v wall, CPU %4v",
			kind.name, n, pub.rows/n, pub.statements/n, mean(pub.wall, n), mean(pub.cpu, n),
			pull.rows/n, pull.statements/n, mean(pull.wall, n), mean(pull.cpu, n))
		t.Logf("%-27s at one round per %v: %5.0f rows/s written, %4.1f statements/s, mariadbd CPU %4.1f%% of one core",
			"", interval, float64(pub.rows/n)/interval.Seconds(), float64((pub.statements+pull.statements)/n)/interval.Seconds(),
			100*(pub.cpu+pull.cpu).Seconds()/float64(n)/interval.Seconds())
	}
}

// mean returns d/n rounded to the millisecond.
func mean(d time.Duration, n int) time.Duration {
	return (d / time.Duration(n)).Round(time.Millisecond)
}

// phase sums one phase (publish or pull) over rounds.
type phase struct {
	rows, statements int
	wall, cpu        time.Duration
}

// add runs fn and adds its statements (and, for a publish, rows written),
// wall time and mariadbd CPU to p.
func (p *phase) add(stats *loadObserver, pid int, fn func()) {
	stats.reset()
	cpu0, start := cpuTicks(pid), time.Now()
	fn()
	p.wall += time.Since(start)
	p.cpu += time.Duration(cpuTicks(pid)-cpu0) * time.Second / clockTicks
	p.rows += int(stats.rows.Load())
	p.statements += int(stats.statements.Load())
}

// publishAll publishes counts from every region at once.
func publishAll(t *testing.T, stores []*Store, regions []string, counts []global.Count) {
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			if err := s.Publish(ctx, regions[i], counts, now); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// pullAll pulls once in every region, advancing its cursor, and returns
// the number of cells pulled.
func pullAll(t *testing.T, stores []*Store, regions []string, cursors []global.Cursor, interval time.Duration) int {
	n := 0
	for i, s := range stores {
		p, err := s.Pull(ctx, regions[i], cursors[i], now, 3*interval.Milliseconds())
		if err != nil {
			t.Fatal(err)
		}
		cursors[i], n = p.Next, n+len(p.Entries)
	}
	return n
}

// loadCounts returns count for each of n identities' current cells.
func loadCounts(n int, count int64) []global.Count {
	out := make([]global.Count, n)
	for i := range out {
		out[i] = global.Count{Cell: testCell(fmt.Sprintf("user-%05d", i), seq), Count: count, ExpiresAt: (seq + 2) * 60_000}
	}
	return out
}

// loadObserver counts rows written and statements of every call.
type loadObserver struct {
	rows, statements atomic.Int64
}

func (o *loadObserver) ObserveCall(c Call) {
	if c.Op == OpPublish {
		o.rows.Add(int64(c.Rows))
	}
	o.statements.Add(int64(c.Statements))
}

func (o *loadObserver) BreakerChanged(_, _ BreakerState) {}

func (o *loadObserver) reset() { o.rows.Store(0); o.statements.Store(0) }

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTicks = 100

// mariadbPID returns the pid of the local mariadbd (or mysqld), 0 if none.
func mariadbPID() int {
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, c := range comms {
		b, err := os.ReadFile(c)
		if name := strings.TrimSpace(string(b)); err == nil && (name == "mariadbd" || name == "mysqld") {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(c)))
			return pid
		}
	}
	return 0
}

// cpuTicks returns utime+stime of pid in clock ticks, 0 for pid 0.
func cpuTicks(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name: state is field 3,
	// utime 14 and stime 15.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}
