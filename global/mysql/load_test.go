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
	for _, round := range []struct {
		name  string
		count int64 // every region publishes this count for every cell
	}{
		{"insert (first publish)", 1},
		{"update (every count grows)", 2},
		{"update (every count grows)", 3},
		{"update (every count grows)", 4},
		{"no change (same counts)", 4},
		{"no change (same counts)", 4},
	} {
		stats.reset()
		cpu0 := cpuTicks(pid)
		start := time.Now()
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Go(func() {
				if err := s.Publish(ctx, regions[i], loadCounts(identities, round.count), now); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		pulled := 0
		for i, s := range stores {
			p, err := s.Pull(ctx, regions[i], cursors[i], now, interval.Milliseconds()*3)
			if err != nil {
				t.Fatal(err)
			}
			cursors[i], pulled = p.Next, pulled+len(p.Cells)
		}
		elapsed := time.Since(start)
		cpu := time.Duration(cpuTicks(pid)-cpu0) * time.Second / clockTicks
		w, st := stats.rows.Load(), stats.statements.Load()
		t.Logf("%-28s %6d rows written, %5d cells pulled, %3d statements in %6v (%6.0f rows/s at full speed); at one round per %v: %5.0f rows/s, %4.1f statements/s, mariadbd CPU %5v per round = %4.1f%% of one core",
			round.name, w, pulled, st, elapsed.Round(time.Millisecond), float64(w)/elapsed.Seconds(), interval,
			float64(w)/interval.Seconds(), float64(st)/interval.Seconds(), cpu, 100*cpu.Seconds()/interval.Seconds())
	}
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
