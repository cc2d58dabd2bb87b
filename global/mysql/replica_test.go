package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/global/globaltest"
	"github.com/sluicehq/sluice/origin"
)

// mariadb is a mariadbd process of a test's own: an empty data directory
// in a temporary folder, no grant tables (root without a password), TCP on
// a free loopback port only. It is stopped, and its folder removed, when
// the test ends.
type mariadb struct {
	addr string
	dir  string
	db   *sql.DB // root, no database
}

// unavailable skips the test for a reason that is the machine's, not the
// code's, except in CI (CI=true), where it fails it.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (set CI=true to fail instead)", args...)
}

// mariadbd returns the path of the server binary, or "" if there is none.
func mariadbd() string {
	if p, err := osexec.LookPath("mariadbd"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/mariadbd", "/usr/libexec/mariadbd"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// startMariaDB starts a mariadbd with server id id and extra options, and
// waits until it accepts connections.
func startMariaDB(t *testing.T, id int, extra ...string) *mariadb {
	t.Helper()
	bin := mariadbd()
	if bin == "" {
		unavailable(t, "mariadbd is not installed (apt-get install mariadb-server)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		unavailable(t, "no free loopback port: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	args := append([]string{"--no-defaults", "--datadir=" + dir, "--tmpdir=" + dir,
		"--socket=" + filepath.Join(dir, "s.sock"), "--pid-file=" + filepath.Join(dir, "s.pid"),
		"--log-error=" + filepath.Join(dir, "error.log"), "--bind-address=127.0.0.1", "--port=" + port,
		"--skip-grant-tables", "--skip-name-resolve", "--server-id=" + fmt.Sprint(id),
		"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M", "--innodb-flush-log-at-trx-commit=2",
		"--innodb-doublewrite=0", "--max-connections=64"}, extra...)
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	cmd := osexec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		unavailable(t, "start mariadbd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { stop(t, cmd, exited) })
	m := &mariadb{addr: addr, dir: dir}
	m.db = testDB(t, "root@tcp("+addr+")/?timeout=2s")
	deadline := time.Now().Add(20 * time.Second)
	for m.db.Ping() != nil {
		select {
		case err := <-exited:
			exited <- err // for stop
			unavailable(t, "mariadbd exited: %v\n%s", err, m.errorLog())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			unavailable(t, "mariadbd did not accept connections within 20s:\n%s", m.errorLog())
		}
	}
	return m
}

// stop ends the server: SIGTERM, then SIGKILL after 10s.
func stop(t *testing.T, cmd *osexec.Cmd, exited chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Logf("mariadbd %d did not stop on SIGTERM; killing it", cmd.Process.Pid)
		_ = cmd.Process.Kill()
		<-exited
	}
}

// errorLog returns the end of the server's error log.
func (m *mariadb) errorLog() string {
	b, _ := os.ReadFile(filepath.Join(m.dir, "error.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// dsn returns the DSN of database on m.
func (m *mariadb) dsn(database string) string {
	return "root@tcp(" + m.addr + ")/" + database
}

// exec runs statements on m, failing t on an error.
func (m *mariadb) exec(t *testing.T, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := m.db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// replicaPair is a primary with a binary log and a replica of it.
type replicaPair struct {
	primary, replica *mariadb
	database         string // a database of the test's own, on both
}

// startReplicaPair starts a primary and a replica replicating all of it
// from its first binary log, and a fresh database on both.
func startReplicaPair(t *testing.T) *replicaPair {
	t.Helper()
	p := &replicaPair{
		primary: startMariaDB(t, 1, "--log-bin="+"primary-bin", "--binlog-format=MIXED", "--sync-binlog=0"),
		replica: startMariaDB(t, 2, "--skip-log-bin", "--relay-log=replica-relay", "--skip-slave-start"),
	}
	_, port, _ := net.SplitHostPort(p.primary.addr)
	// The replica keeps its GTID position in mysql.gtid_slave_pos, which
	// an empty data directory lacks.
	p.replica.exec(t, "CREATE DATABASE mysql",
		`CREATE TABLE mysql.gtid_slave_pos (domain_id INT UNSIGNED NOT NULL, sub_id BIGINT UNSIGNED NOT NULL,
  server_id INT UNSIGNED NOT NULL, seq_no BIGINT UNSIGNED NOT NULL, PRIMARY KEY (domain_id, sub_id)) ENGINE=InnoDB`,
		"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT="+port+", MASTER_USER='root', MASTER_PASSWORD='', "+
			"MASTER_LOG_FILE='primary-bin.000001', MASTER_LOG_POS=4, MASTER_USE_GTID=no, MASTER_CONNECT_RETRY=1",
		"START SLAVE")
	var b [5]byte
	_, _ = rand.Read(b[:])
	p.database = "sluice_replica_" + hex.EncodeToString(b[:])
	p.primary.exec(t, "CREATE DATABASE "+p.database)
	p.caughtUp(t)
	return p
}

// caughtUp waits until the replica has applied all that the primary has
// written so far.
func (p *replicaPair) caughtUp(t *testing.T) {
	t.Helper()
	var file string
	var pos int64
	var doDB, ignoreDB sql.NullString
	if err := p.primary.db.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &doDB, &ignoreDB); err != nil {
		t.Fatalf("SHOW MASTER STATUS: %v", err)
	}
	var got sql.NullInt64
	if err := p.replica.db.QueryRow("SELECT MASTER_POS_WAIT(?, ?, 20)", file, pos).Scan(&got); err != nil || !got.Valid || got.Int64 < 0 {
		t.Fatalf("the replica did not reach %s:%d within 20s: %v, %v\n%s", file, pos, got, err, p.replica.errorLog())
	}
}

// pause stops the replica's SQL thread: it receives the primary's log and
// applies nothing of it until resume, or until t ends.
func (p *replicaPair) pause(t *testing.T) {
	p.replica.exec(t, "STOP SLAVE SQL_THREAD")
	t.Cleanup(func() { _, _ = p.replica.db.Exec("START SLAVE SQL_THREAD") }) // a note if running
}

// resume starts the replica's SQL thread again.
func (p *replicaPair) resume(t *testing.T) { p.replica.exec(t, "START SLAVE SQL_THREAD") }

// clock returns a server's UTC_TIMESTAMP(6), µs since the epoch.
func clock(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var c int64
	if err := db.QueryRow("SELECT " + clockExpr).Scan(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

// stores opens, with a table prefix of the test's own, a store on the
// primary alone and one whose reads go to the replica.
func (p *replicaPair) stores(t *testing.T, cfg Config) (primary, replica *Store) {
	t.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	cfg.TablePrefix = "r" + hex.EncodeToString(b[:]) + "_"
	primary = openStore(t, cfg, p.primary.dsn(p.database))
	cfg.ReadDSN = p.replica.dsn(p.database)
	replica = openStore(t, cfg, p.primary.dsn(p.database))
	p.caughtUp(t) // the tables
	return primary, replica
}

// errNotYet reports a condition that does not hold yet.
var errNotYet = errors.New("not yet")

// within polls f every 20ms until it returns nil or d passes.
func within(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("after %v: %v", d, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// describe lists what differs between got and want.
func describe[K comparable, V comparable](got, want map[K]V) error {
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			diffs = append(diffs, fmt.Sprintf("%v: %v, want %v", k, g, w))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	if len(diffs) > 5 {
		diffs = append(diffs[:5], fmt.Sprintf("and %d more", len(diffs)-5))
	}
	return fmt.Errorf("%w: %s", errNotYet, strings.Join(diffs, "; "))
}

// follower pulls a store the way the limiter does, keeping its cursors and
// the newest counts and the denials it has read.
type follower struct {
	s                    *Store
	region               string
	now                  int64 // the limiter's clock of its reads
	cursor, denialCursor global.Cursor
	entries              map[global.Entry]int64 // the highest count read of each (cell, region)
	denials              map[origin.Cell]bool
}

func newFollower(s *Store, region string, now int64) *follower {
	return &follower{s: s, region: region, now: now, entries: map[global.Entry]int64{}, denials: map[origin.Cell]bool{}}
}

// pull reads once with PullWithDenials and returns the cells and denials
// it had not read before.
func (f *follower) pull() (fresh int, err error) {
	p, ds, dc, err := f.s.PullWithDenials(ctx, f.region, f.cursor, f.denialCursor, f.now, 60_000)
	if err != nil {
		return 0, err
	}
	f.cursor, f.denialCursor = p.Next, dc
	for _, e := range p.Entries {
		k := global.Entry{Cell: e.Cell, Region: e.Region}
		if old, ok := f.entries[k]; !ok || e.Count > old {
			fresh++
		}
		f.entries[k] = max(f.entries[k], e.Count)
	}
	for _, d := range ds {
		if !f.denials[d.Cell] {
			fresh++
		}
		f.denials[d.Cell] = true
	}
	return fresh, nil
}

// has reports what of want (Others per cell) and of denials f lacks.
func (f *follower) has(want map[origin.Cell]int64, denials []origin.Cell) error {
	got := map[origin.Cell]int64{}
	for k, n := range f.entries {
		if k.Region != f.region {
			got[k.Cell] += n
		}
	}
	if err := describe(got, want); err != nil {
		return fmt.Errorf("cells: %w", err)
	}
	seen := map[origin.Cell]bool{}
	wantSeen := map[origin.Cell]bool{}
	for _, c := range denials {
		seen[c], wantSeen[c] = f.denials[c], true
	}
	if err := describe(seen, wantSeen); err != nil {
		return fmt.Errorf("denials: %w", err)
	}
	return nil
}

func counts(now int64, cells map[origin.Cell]int64) []global.Count {
	out := make([]global.Count, 0, len(cells))
	for c, n := range cells {
		out = append(out, global.Count{Cell: c, Count: n, ExpiresAt: now + 60_000})
	}
	return out
}

func denialsOf(now int64, region string, cells ...origin.Cell) []global.Denial {
	out := make([]global.Denial, 0, len(cells))
	for _, c := range cells {
		out = append(out, global.Denial{Cell: c, Limit: 10, Usage: 10, Region: region, ExpiresAt: now + 60_000})
	}
	return out
}

// TestReadReplica runs the store against a real MariaDB replica: a primary
// with a binary log and a replica of it, two mariadbd processes of the
// test's own on loopback ports (the shared server has no binary log, which
// cannot be turned on while it runs).
func TestReadReplica(t *testing.T) {
	p := startReplicaPair(t)
	t.Run("reads go to the replica, writes to the primary", func(t *testing.T) { testReplicaRoutes(t, p) })
	t.Run("a paused replica delays rows, never skips one", func(t *testing.T) { testReplicaPaused(t, p) })
	for _, tc := range []struct {
		name     string
		pageRows int
		now      int64
	}{
		{"whole reads", 0, time.Now().UnixMilli()},
		{"pages of 7 rows", 7, now}, // now is far ahead of the database clock: every pull pages
	} {
		t.Run("a lagging replica loses no row: "+tc.name, func(t *testing.T) { testReplicaLagging(t, p, tc.pageRows, tc.now) })
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// onPrimary returns the result of the integer query q on the primary, with
// {p} naming s's tables.
func onPrimary(t *testing.T, p *replicaPair, s *Store, q string) int64 {
	t.Helper()
	var n int64
	q = strings.ReplaceAll(q, "{p}", p.database+"."+s.cfg.TablePrefix)
	if err := p.primary.db.QueryRow(q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// pulled returns what a Pull from the zero cursor tells region, by cell.
func pulled(t *testing.T, s *Store, region string) map[origin.Cell]view {
	t.Helper()
	pl, err := s.Pull(ctx, region, 0, now, 60_000)
	must(t, err)
	return globaltest.Sums(region, pl.Entries)
}

// testReplicaRoutes: a store with a read replica writes everything on the
// primary and reads every region's rows (Pull, Denials, PullWithDenials)
// on the replica: while the replica is paused, it does not see what the
// primary holds.
func testReplicaRoutes(t *testing.T, p *replicaPair) {
	prim, rep := p.stores(t, Config{})
	x, y, z, w := testCell("x", seq), testCell("y", seq), testCell("z", seq), testCell("w", seq)
	must(t, prim.Publish(ctx, "us", counts(now, map[origin.Cell]int64{x: 3, y: 4}), now))
	must(t, prim.Announce(ctx, "us", now))
	must(t, prim.EmitDenials(ctx, denialsOf(now, "us", w)))
	must(t, rep.Publish(ctx, "eu", counts(now, map[origin.Cell]int64{x: 1}), now))
	must(t, rep.Announce(ctx, "eu", now))
	must(t, rep.EmitDenials(ctx, denialsOf(now, "eu", z)))
	if n := onPrimary(t, p, rep, `SELECT (SELECT COUNT(*) FROM {p}batches WHERE region = 'eu')
  + (SELECT COUNT(*) FROM {p}blocklist WHERE region = 'eu') + (SELECT COUNT(*) FROM {p}regions WHERE region = 'eu')`); n != 3 {
		t.Fatalf("the primary holds %d of the 3 rows the store wrote", n)
	}
	p.caughtUp(t)
	want := map[origin.Cell]view{x: {Cell: x, Others: 3, Own: 1}, y: {Cell: y, Others: 4}}
	must(t, describe(pulled(t, rep, "eu"), want))
	ds, _, err := rep.Denials(ctx, "eu", 0, now)
	if err != nil || len(ds) != 1 || ds[0].Cell != w {
		t.Fatalf("Denials = %v, %v; want the denial of us only", ds, err)
	}
	pl, ds, _, err := rep.PullWithDenials(ctx, "eu", 0, 0, now, 60_000)
	if err != nil || len(pl.Entries) != 3 || pl.Regions != 2 || len(ds) != 1 {
		t.Fatalf("PullWithDenials = %+v, %v, %v; want 3 entries (x of us and of eu, y of us), 2 regions, 1 denial", pl, ds, err)
	}

	p.pause(t)
	must(t, prim.Publish(ctx, "us", counts(now, map[origin.Cell]int64{x: 9}), now))
	if n := onPrimary(t, p, rep, "SELECT SUM(cells) FROM {p}batches WHERE region = 'us'"); n != 3 {
		t.Fatalf("the primary holds %d cells' counts of us, want 3 (x and y, then x)", n)
	}
	must(t, describe(pulled(t, rep, "eu"), want)) // the replica's rows, not the primary's
	p.resume(t)
	p.caughtUp(t)
	want[x] = view{Cell: x, Others: 9, Own: 1}
	must(t, describe(pulled(t, rep, "eu"), want))
}

// testReplicaPaused: rows written while the replica applies nothing (its
// SQL thread stopped) for longer than the overlap are not read meanwhile,
// the cursors stay before them, and they are all read once it resumes. A
// follower whose cursor is the replica's own clock minus the overlap (the
// primary's rule, on the replica) passes them and never reads them: the
// test would catch a skip.
func testReplicaPaused(t *testing.T, p *replicaPair) {
	const overlap = 200 * time.Millisecond
	nowMS := time.Now().UnixMilli()
	prim, rep := p.stores(t, Config{CursorOverlap: overlap})
	naive := openStore(t, Config{TablePrefix: rep.cfg.TablePrefix, CursorOverlap: overlap, ReadDSN: p.replica.dsn(p.database)},
		p.primary.dsn(p.database))
	naive.rq = naive.q.primary // the replica's clock as the cursor's
	good, bad := newFollower(rep, "eu", nowMS), newFollower(naive, "eu", nowMS)
	a0 := testCell("a0", seq)
	want := map[origin.Cell]int64{a0: 1, testCell("a1", seq): 1, testCell("a2", seq): 1}
	must(t, prim.Publish(ctx, "us", counts(nowMS, want), nowMS))
	p.caughtUp(t)
	within(t, 5*time.Second, func() error {
		_, err1 := good.pull()
		_, err2 := bad.pull()
		return errors.Join(err1, err2, good.has(want, nil), bad.has(want, nil))
	})

	p.pause(t)
	before := clock(t, p.primary.db) // every row written from here on changes after it
	var denied []origin.Cell
	for i := range 3 {
		batch := map[origin.Cell]int64{a0: int64(5 + i)}
		for j := range 4 {
			batch[testCell(fmt.Sprintf("b%d-%d", i, j), seq)] = int64(i + 1)
		}
		d := testCell(fmt.Sprintf("d%d", i), seq)
		must(t, prim.Publish(ctx, "us", counts(nowMS, batch), nowMS))
		must(t, prim.EmitDenials(ctx, denialsOf(nowMS, "us", d)))
		for c, n := range batch {
			want[c] = n
		}
		denied = append(denied, d)
		time.Sleep(100 * time.Millisecond)
	}
	after := clock(t, p.primary.db)
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		fresh, err := good.pull()
		must(t, err)
		if fresh > 0 {
			t.Fatalf("read %d new rows from a paused replica", fresh)
		}
		if int64(good.cursor) >= before || int64(good.denialCursor) >= before {
			t.Fatalf("cursors %d, %d passed %d, before rows the replica has yet to show", good.cursor, good.denialCursor, before)
		}
		_, err = bad.pull()
		must(t, err)
	}
	if int64(bad.cursor) <= after || int64(bad.denialCursor) <= after {
		t.Fatalf("the replica's clock minus the overlap (%d, %d) did not pass the rows written by %d: the test would not catch a skip",
			bad.cursor, bad.denialCursor, after)
	}

	p.resume(t)
	p.caughtUp(t)
	within(t, 10*time.Second, func() error {
		_, err := good.pull()
		return errors.Join(err, good.has(want, denied))
	})
	for range 2 {
		_, err := bad.pull()
		must(t, err)
	}
	if bad.has(want, denied) == nil {
		t.Fatal("the replica's clock as the cursor's read every row written during the pause: the test would not catch a skip")
	}
}

// testReplicaLagging: two regions publish new cells and raise a shared one
// while the replica is stopped for 400 ms (longer than the overlap) and
// started for 100 ms, again and again, and a follower pulls every 20 ms. Once the writers stop and the replica has
// caught up, the follower has read every cell at its last count and every
// denial: the lag delayed rows, it lost none.
func testReplicaLagging(t *testing.T, p *replicaPair, pageRows int, nowMS int64) {
	const steps = 80
	prim, rep := p.stores(t, Config{CursorOverlap: 300 * time.Millisecond, PageRows: pageRows, ChunkRows: 1}) // a page is pageRows rows
	f := newFollower(rep, "eu", nowMS)
	hot := testCell("hot", seq)
	want := map[origin.Cell]int64{}
	var denied []origin.Cell
	errs := make(chan error, 8)
	var writers sync.WaitGroup
	for _, region := range []string{"us", "ap"} {
		for i := range steps {
			want[testCell(fmt.Sprintf("%s-c%d", region, i), seq)] = int64(i + 1)
			if i%5 == 0 {
				denied = append(denied, testCell(fmt.Sprintf("%s-d%d", region, i), seq))
			}
		}
		want[hot] += steps
		writers.Go(func() { errs <- write(prim, region, steps, nowMS) })
	}
	written := make(chan struct{})
	go func() { writers.Wait(); close(written) }()
	stopToggling := toggle(p, 400*time.Millisecond, 100*time.Millisecond)

	pulls, idle := 0, 0
	for done := false; !done; time.Sleep(20 * time.Millisecond) {
		select {
		case <-written:
			done = true
		default:
		}
		fresh, err := f.pull()
		must(t, err)
		pulls++
		if fresh == 0 {
			idle++
		}
	}
	toggles := stopToggling()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	p.caughtUp(t)
	within(t, 10*time.Second, func() error {
		_, err := f.pull()
		return errors.Join(err, f.has(want, denied))
	})
	t.Logf("%d pulls while writing, %d of them with nothing new; the replica paused and resumed %d times", pulls, idle, toggles)
}

// write publishes, for region, steps new cells of counts 1, 2, ... and the
// shared cell "hot" raised to the same count, one statement each 10 ms, and
// a denial every fifth step.
func write(s *Store, region string, steps int, nowMS int64) error {
	for i := range steps {
		c := testCell(fmt.Sprintf("%s-c%d", region, i), seq)
		n := int64(i + 1)
		if err := s.Publish(ctx, region, counts(nowMS, map[origin.Cell]int64{c: n, testCell("hot", seq): n}), nowMS); err != nil {
			return err
		}
		if i%5 == 0 {
			if err := s.EmitDenials(ctx, denialsOf(nowMS, region, testCell(fmt.Sprintf("%s-d%d", region, i), seq))); err != nil {
				return err
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// toggle stops the replica's SQL thread for paused, starts it for running,
// and so on until stop is called; stop leaves it running and returns how
// many times it was stopped.
func toggle(p *replicaPair, paused, running time.Duration) (stop func() int) {
	out := make(chan int, 1)
	quit := make(chan struct{})
	go func() {
		n, stopped := 0, false
		for {
			wait, stmt := running, "STOP SLAVE SQL_THREAD"
			if stopped {
				wait, stmt = paused, "START SLAVE SQL_THREAD"
			}
			select {
			case <-quit:
				if stopped {
					_, _ = p.replica.db.Exec("START SLAVE SQL_THREAD")
				}
				out <- n
				return
			case <-time.After(wait):
			}
			if _, err := p.replica.db.Exec(stmt); err == nil {
				stopped = !stopped
				if stopped {
					n++
				}
			}
		}
	}()
	return func() int {
		close(quit)
		return <-out
	}
}
