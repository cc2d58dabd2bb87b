// Package testenv locates the real services that Sluice's tests run against
// (Redis and MariaDB/MySQL) and fails a test with the command that brings them
// up when they are not reachable. `make test` (scripts/services.sh) starts or
// installs them first, so a plain `go test` only needs them already running.
// The Redis Cluster is optional outside CI: its tests skip when it is absent.
package testenv

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// RedisAddr returns the address of the test Redis server: $SLUICE_TEST_REDIS,
// or 127.0.0.1:6379. It fails t if nothing listens there.
func RedisAddr(t testing.TB) string {
	t.Helper()
	return reachable(t, "SLUICE_TEST_REDIS", "127.0.0.1:6379", "Redis")
}

// RedisClusterAddrs returns the seed addresses of the test Redis Cluster:
// $SLUICE_TEST_REDIS_CLUSTER (comma-separated host:port), or the six nodes
// scripts/services.sh starts on 127.0.0.1:7101-7106. When one of them is not
// reachable it skips t, or fails it under CI (the environment variable CI is
// set), where the cluster must be there.
func RedisClusterAddrs(t testing.TB) []string {
	t.Helper()
	list := os.Getenv("SLUICE_TEST_REDIS_CLUSTER")
	if list == "" {
		list = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103,127.0.0.1:7104,127.0.0.1:7105,127.0.0.1:7106"
	}
	addrs := strings.Split(list, ",")
	for _, addr := range addrs {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			msg := fmt.Sprintf("testenv: Redis Cluster node %s is not reachable (%v); run `scripts/services.sh` to start the cluster, or set SLUICE_TEST_REDIS_CLUSTER", addr, err)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		_ = conn.Close()
	}
	return addrs
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

// AwayFromRollover waits, when needed, until at least need is left before the
// wall clock's next multiple of window. A test that runs on the real clock and
// asserts what a counter does within one window calls it first: a new window
// is a new counter, which the limiter reads from its origin.
func AwayFromRollover(t testing.TB, window, need time.Duration) {
	t.Helper()
	if need >= window {
		t.Fatalf("testenv: %v cannot fit in a window of %v", need, window)
	}
	now := time.Now()
	if left := now.Truncate(window).Add(window).Sub(now); left < need {
		t.Logf("testenv: waiting %v for the next window of %v", left.Round(time.Millisecond), window)
		time.Sleep(left + time.Millisecond)
	}
}
