// Package testenv locates the real services that Sluice's tests run against
// (Redis and MariaDB/MySQL) and fails a test with the command that brings them
// up when they are not reachable. `make test` (scripts/services.sh) starts or
// installs them first, so a plain `go test` only needs them already running.
package testenv

import (
	"net"
	"os"
	"testing"
	"time"
)

// RedisAddr returns the address of the test Redis server: $SLUICE_TEST_REDIS,
// or 127.0.0.1:6379. It fails t if nothing listens there.
func RedisAddr(t testing.TB) string {
	t.Helper()
	return reachable(t, "SLUICE_TEST_REDIS", "127.0.0.1:6379", "Redis")
}

// MySQLDSN returns the DSN of the test MariaDB/MySQL database:
// $SLUICE_TEST_MYSQL_DSN, or root with no password at 127.0.0.1:3306,
// database test. It fails t if nothing listens there.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	if dsn := os.Getenv("SLUICE_TEST_MYSQL_DSN"); dsn != "" {
		return dsn
	}
	addr := reachable(t, "SLUICE_TEST_MYSQL_ADDR", "127.0.0.1:3306", "MariaDB")
	return "root@tcp(" + addr + ")/test?parseTime=true&multiStatements=true"
}

func reachable(t testing.TB, env, def, what string) string {
	t.Helper()
	addr := os.Getenv(env)
	if addr == "" {
		addr = def
	}
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("testenv: %s is not reachable at %s (%v); run `scripts/services.sh` (or `make test`) to start it, or set %s", what, addr, err, env)
	}
	_ = conn.Close()
	return addr
}
