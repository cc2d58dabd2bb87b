package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/mysql"
	"github.com/sluicehq/sluice/store/storetest"
)

// open returns a store on the real MariaDB whose tables carry a prefix
// unique to this test; they are dropped at cleanup. Other tests' tables are
// never touched.
func open(t *testing.T) (*mysql.Store, string) {
	t.Helper()
	prefix := fmt.Sprintf("t%d_", time.Now().UnixNano()%1e12)
	return openPrefix(t, testenv.MySQLDSN(t), prefix), prefix
}

// openPrefix opens a store on dsn with the given table prefix and drops its
// tables at cleanup.
func openPrefix(t *testing.T, dsn, prefix string) *mysql.Store {
	t.Helper()
	ctx := context.Background()
	s, err := mysql.Open(ctx, mysql.Config{DSN: dsn, TablePrefix: prefix, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tbl := range []string{"overrides", "namespaces", "version"} {
			if err := s.Exec(ctx, "DROP TABLE IF EXISTS {p}"+tbl, prefix); err != nil {
				t.Errorf("drop %s%s: %v", prefix, tbl, err)
			}
		}
		s.Close()
	})
	return s
}

func TestConformance(t *testing.T) {
	s, prefix := open(t)
	storetest.Run(t, s, "ws-"+prefix)
}

// TestCap runs the conformance suite's test of the bound on overrides; its
// racing writers run their transactions at once on the pool's connections.
func TestCap(t *testing.T) {
	_, prefix := open(t)
	s, err := mysql.Open(context.Background(), mysql.Config{DSN: testenv.MySQLDSN(t), TablePrefix: prefix, MaxOverrides: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.RunCap(t, s, "ws-"+prefix, 3)
}

func TestOpenTwiceIsIdempotent(t *testing.T) {
	_, prefix := open(t)
	s2, err := mysql.Open(context.Background(), mysql.Config{DSN: testenv.MySQLDSN(t), TablePrefix: prefix})
	if err != nil {
		t.Fatalf("second Open on existing tables: %v", err)
	}
	s2.Close()
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  mysql.Config
		bad  bool
	}{
		{"empty dsn", mysql.Config{}, true},
		{"bad dsn", mysql.Config{DSN: "tcp(::"}, true},
		{"bad prefix", mysql.Config{DSN: "root@tcp(127.0.0.1:3306)/test", TablePrefix: "x; DROP"}, true},
		{"negative pool", mysql.Config{DSN: "root@tcp(127.0.0.1:3306)/test", MaxOpenConns: -1}, true},
		{"negative poll", mysql.Config{DSN: "root@tcp(127.0.0.1:3306)/test", PollInterval: -1}, true},
		{"negative overrides", mysql.Config{DSN: "root@tcp(127.0.0.1:3306)/test", MaxOverrides: -1}, true},
		{"ok", mysql.Config{DSN: "root@tcp(127.0.0.1:3306)/test", TablePrefix: "sluice_"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err != nil) != tc.bad || (err != nil && !errors.Is(err, mysql.ErrInvalidConfig)) {
				t.Fatalf("Validate() = %v", err)
			}
		})
	}
}

// TestWritesBumpTheVersion: every write that changes something increments
// the change marker once; a write that changes nothing leaves it.
func TestWritesBumpTheVersion(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	var ns store.Namespace
	for _, tc := range []struct {
		name string
		op   func() error
		bump int64
	}{
		{"namespace created", func() (err error) { ns, err = s.EnsureNamespace(ctx, "ws", "api"); return err }, 1},
		{"namespace exists", func() error { _, err := s.EnsureNamespace(ctx, "ws", "api"); return err }, 0},
		{"override set", func() error {
			_, err := s.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: "x", Limit: 1, Duration: time.Second})
			return err
		}, 1},
		{"override replaced", func() error {
			_, err := s.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: "x", Limit: 2, Duration: time.Second})
			return err
		}, 1},
		{"override deleted", func() error { return s.DeleteOverride(ctx, "ws", ns.ID, "x") }, 1},
		{"delete of nothing", func() error {
			if err := s.DeleteOverride(ctx, "ws", ns.ID, "x"); !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("want ErrNotFound, got %w", err)
			}
			return nil
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := s.Version(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.op(); err != nil {
				t.Fatal(err)
			}
			after, err := s.Version(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if after-before != tc.bump {
				t.Fatalf("version went from %d to %d, want +%d", before, after, tc.bump)
			}
		})
	}
}

// TestWatchReportsOtherStoresWrites: a write through one store (node) is
// reported by the other store's Watch within a few poll intervals.
func TestWatchReportsOtherStoresWrites(t *testing.T) {
	a, prefix := open(t)
	b, err := mysql.Open(context.Background(), mysql.Config{DSN: testenv.MySQLDSN(t), TablePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	changes := storetest.Watch(t, a)
	storetest.WaitChanged(t, changes, 5*time.Second, "the first read")
	ctx := context.Background()
	ns, err := b.EnsureNamespace(ctx, "ws", "api")
	if err != nil {
		t.Fatal(err)
	}
	storetest.WaitChanged(t, changes, time.Second, "namespace created")
	storetest.Drain(changes)
	if _, err := b.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: "x", Limit: 1, Duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	storetest.WaitChanged(t, changes, time.Second, "override set")
}

// TestCachePropagation: two nodes' caches over one database see each
// other's writes through the polled change marker.
func TestCachePropagation(t *testing.T) {
	a, prefix := open(t)
	b, err := mysql.Open(context.Background(), mysql.Config{DSN: testenv.MySQLDSN(t), TablePrefix: prefix, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	storetest.RunCachePropagation(t, a, b, "ws-propagation")
}

// TestUnavailable: with MariaDB unreachable, reads and writes fail with
// store.ErrUnavailable; when it is back, the same store works again and
// Watch reports the change another node made meanwhile.
func TestUnavailable(t *testing.T) {
	cfg, err := driver.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	other, prefix := open(t) // another node, with a direct connection
	proxy := testenv.NewProxy(t, cfg.Addr)
	cfg.Addr = proxy.Addr()
	cfg.Timeout = time.Second
	s, err := mysql.Open(context.Background(), mysql.Config{DSN: cfg.FormatDSN(), TablePrefix: prefix, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	ns, err := s.EnsureNamespace(ctx, "ws", "api")
	if err != nil {
		t.Fatal(err)
	}
	changes := storetest.Watch(t, s)
	storetest.WaitChanged(t, changes, 5*time.Second, "the first read")
	ops := []struct {
		name string
		op   func() error
	}{
		{"EnsureNamespace", func() error { _, err := s.EnsureNamespace(ctx, "ws", "new"); return err }},
		{"SetOverride", func() error {
			_, err := s.SetOverride(ctx, store.Override{Workspace: "ws", NamespaceID: ns.ID, Identifier: "x", Limit: 1, Duration: time.Second})
			return err
		}},
		{"DeleteOverride", func() error { return s.DeleteOverride(ctx, "ws", ns.ID, "x") }},
		{"Override", func() error { _, err := s.Override(ctx, "ws", ns.ID, "x"); return err }},
		{"Snapshot", func() error { _, err := s.Snapshot(ctx); return err }},
	}
	proxy.Down()
	for _, tc := range ops {
		t.Run("down/"+tc.name, func(t *testing.T) {
			if err := tc.op(); !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("err %v, want ErrUnavailable", err)
			}
		})
	}
	if _, err := other.EnsureNamespace(ctx, "ws", "while-down"); err != nil {
		t.Fatal(err)
	}
	storetest.Drain(changes)
	proxy.Up()
	storetest.WaitChanged(t, changes, 5*time.Second, "the change made while unreachable")
	for _, tc := range ops {
		t.Run("up/"+tc.name, func(t *testing.T) {
			if err := tc.op(); err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("after recovery: %v", err)
			}
		})
	}
}
