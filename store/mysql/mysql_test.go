package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store/mysql"
	"github.com/sluicehq/sluice/store/storetest"
)

// open returns a store on the real MariaDB whose tables carry a prefix
// unique to this test; they are dropped at cleanup. Other tests' tables are
// never touched.
func open(t *testing.T) (*mysql.Store, string) {
	t.Helper()
	prefix := fmt.Sprintf("t%d_", time.Now().UnixNano()%1e12)
	ctx := context.Background()
	s, err := mysql.Open(ctx, mysql.Config{DSN: testenv.MySQLDSN(t), TablePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tbl := range []string{"overrides", "namespaces"} {
			if err := s.Exec(ctx, "DROP TABLE IF EXISTS {p}"+tbl, prefix); err != nil {
				t.Errorf("drop %s%s: %v", prefix, tbl, err)
			}
		}
		s.Close()
	})
	return s, prefix
}

func TestConformance(t *testing.T) {
	s, prefix := open(t)
	storetest.Run(t, s, "ws-"+prefix)
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
