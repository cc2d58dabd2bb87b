package mysql

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// countingHandler counts the log records whose message contains substr.
type countingHandler struct {
	substr string
	n      *atomic.Int64
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h countingHandler) WithGroup(string) slog.Handler            { return h }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.substr) {
		h.n.Add(1)
	}
	return nil
}

func countingLogger(substr string) (*slog.Logger, *atomic.Int64) {
	n := &atomic.Int64{}
	return slog.New(countingHandler{substr: substr, n: n}), n
}

type versionRow struct {
	version int
	applied string
}

func schemaVersions(t *testing.T, prefix string) []versionRow {
	t.Helper()
	db := testDB(t, testenv.MySQLDSN(t))
	rows, err := db.Query("SELECT version, applied_at FROM " + prefix + "schema_version ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []versionRow
	for rows.Next() {
		var r versionRow
		if err := rows.Scan(&r.version, &r.applied); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestMigrateConcurrently starts 8 stores on one empty prefix at once, each
// with a pool of its own: all succeed, exactly one applies the schema, and
// a later start applies nothing.
func TestMigrateConcurrently(t *testing.T) {
	prefix := newPrefix(t)
	log, applied := countingLogger("applied migration")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			s, err := Open(context.Background(), testenv.MySQLDSN(t), Config{TablePrefix: prefix, Logger: log})
			if err != nil {
				errs <- err
				return
			}
			errs <- s.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open: %v", err)
		}
	}
	ms, err := loadMigrations(migrations)
	if err != nil {
		t.Fatal(err)
	}
	if got := applied.Load(); got != int64(len(ms)) {
		t.Fatalf("%d migrations applied by 8 concurrent starts, want %d", got, len(ms))
	}
	before := schemaVersions(t, prefix)
	if len(before) != len(ms) {
		t.Fatalf("schema_version rows %v, want %d", before, len(ms))
	}

	s := openStore(t, Config{TablePrefix: prefix, Logger: log})
	if got := applied.Load(); got != int64(len(ms)) {
		t.Fatalf("a second start applied %d migrations", got-int64(len(ms)))
	}
	if after := schemaVersions(t, prefix); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a second start changed schema_version: %v, was %v", after, before)
	}
	if err := s.Announce(context.Background(), "a", 1); err != nil {
		t.Fatalf("store on the migrated schema: %v", err)
	}
}

// TestMigrateLaterVersion migrates a schema at version 1 to a version 2
// that alters a table: only version 2 runs, and running it again is a
// no-op.
func TestMigrateLaterVersion(t *testing.T) {
	prefix := newPrefix(t)
	db := testDB(t, testenv.MySQLDSN(t))
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + prefix + "extra") })
	all, err := loadMigrations(migrations)
	if err != nil {
		t.Fatal(err)
	}
	v1 := all[:1] // the shipped version 1, followed here by a made-up version 2
	v2, err := loadMigrations(fstest.MapFS{
		"migrations/0001_init.sql":  {Data: []byte(v1[0].sql)},
		"migrations/0002_extra.sql": {Data: []byte("-- a later change\nCREATE TABLE IF NOT EXISTS {p}extra (id INT PRIMARY KEY);\nALTER TABLE {p}regions ADD COLUMN IF NOT EXISTS note VARCHAR(10) NULL;\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nop := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name string
		ms   []migration
		want string
	}{
		{"empty schema to v1", v1, "[1]"},
		{"v1 to v2", v2, "[2]"},
		{"v2 again", v2, "[]"},
		{"older binary on v2", v1, "[]"},
	} {
		got, err := migrate(ctx, db, prefix, tc.ms, time.Second, nop)
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Fatalf("%s: applied %v, %v; want %s", tc.name, got, err, tc.want)
		}
	}
	if _, err := db.Exec("INSERT INTO " + prefix + "regions (region, last_seen, note) VALUES ('r', 1, 'v2')"); err != nil {
		t.Fatalf("v2's column: %v", err)
	}
}

func TestLoadMigrations(t *testing.T) {
	sql := &fstest.MapFile{Data: []byte("SELECT 1;\n")}
	for _, tc := range []struct {
		name  string
		files fstest.MapFS
		want  string // versions, or "error"
	}{
		{"sorted by version", fstest.MapFS{"migrations/0010_b.sql": sql, "migrations/0002_a.sql": sql}, "[2 10]"},
		{"no files", fstest.MapFS{}, "[]"},
		{"no number", fstest.MapFS{"migrations/init.sql": sql}, "error"},
		{"zero version", fstest.MapFS{"migrations/0000_x.sql": sql}, "error"},
		{"shared version", fstest.MapFS{"migrations/0001_a.sql": sql, "migrations/1_b.sql": sql}, "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := loadMigrations(tc.files)
			got := "error"
			if err == nil {
				vs := []int{}
				for _, m := range ms {
					vs = append(vs, m.version)
				}
				got = fmt.Sprint(vs)
			}
			if got != tc.want {
				t.Fatalf("got %s (%v), want %s", got, err, tc.want)
			}
		})
	}
}

func TestEmbeddedMigrationsLoad(t *testing.T) {
	ms, err := loadMigrations(migrations)
	if err != nil || len(ms) == 0 || ms[0].version != 1 {
		t.Fatalf("embedded migrations: %v, %v", ms, err)
	}
}

// TestMigrationRunsAgain: the last shipped migration, run again as after a
// node died before recording it, applies cleanly (its CREATE INDEX finds
// the index there) and is recorded once.
func TestMigrationRunsAgain(t *testing.T) {
	prefix := newPrefix(t)
	db := testDB(t, testenv.MySQLDSN(t))
	all, err := loadMigrations(migrations)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nop := slog.New(slog.DiscardHandler)
	if _, err := migrate(ctx, db, prefix, all, time.Second, nop); err != nil {
		t.Fatal(err)
	}
	last := all[len(all)-1].version
	if _, err := db.Exec("DELETE FROM "+prefix+"schema_version WHERE version = ?", last); err != nil {
		t.Fatal(err)
	}
	got, err := migrate(ctx, db, prefix, all, time.Second, nop)
	if err != nil || fmt.Sprint(got) != fmt.Sprintf("[%d]", last) {
		t.Fatalf("running version %d again applied %v, %v", last, got, err)
	}
}
