package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestMain fails the package if any goroutine outlives the tests: every
// store, pool and proxy a test opens is closed by the test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// tables are the tables a store creates, dropped after each test.
var tables = []string{"batches", "counters", "blocklist", "regions", "schema_version"}

// newPrefix returns a table prefix unique to this test run, so tests and
// packages sharing the database never see each other's rows.
func newPrefix(t testing.TB) string {
	t.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	prefix := "t" + hex.EncodeToString(b[:]) + "_"
	t.Cleanup(func() { dropTables(t, prefix) })
	return prefix
}

// dropTables drops prefix's tables through a pool of its own.
func dropTables(t testing.TB, prefix string) {
	db := testDB(t, testenv.MySQLDSN(t))
	for _, tbl := range tables {
		if _, err := db.Exec("DROP TABLE IF EXISTS " + prefix + tbl); err != nil {
			t.Errorf("drop %s%s: %v", prefix, tbl, err)
		}
	}
	_ = db.Close()
}

// testDB opens a plain pool on dsn, closed when t ends.
func testDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// openStore opens a Store on the test database (or on dsn, if given) with
// a fresh table prefix unless cfg names one. It is closed when t ends.
func openStore(t testing.TB, cfg Config, dsn ...string) *Store {
	t.Helper()
	target := testenv.MySQLDSN(t)
	if len(dsn) > 0 {
		target = dsn[0]
	}
	if cfg.TablePrefix == "" {
		cfg.TablePrefix = newPrefix(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, target, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// recorder is an Observer that keeps everything it sees.
type recorder struct {
	mu          sync.Mutex
	calls       []Call
	transitions [][2]BreakerState
}

func (r *recorder) ObserveCall(c Call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) BreakerChanged(from, to BreakerState) {
	r.mu.Lock()
	r.transitions = append(r.transitions, [2]BreakerState{from, to})
	r.mu.Unlock()
}

func (r *recorder) outcomes() map[Outcome]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[Outcome]int{}
	for _, c := range r.calls {
		m[c.Outcome]++
	}
	return m
}

func (r *recorder) states() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, tr := range r.transitions {
		b.WriteString(tr[0].String() + "->" + tr[1].String() + " ")
	}
	return strings.TrimSpace(b.String())
}

// eventually polls cond every 20ms until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
