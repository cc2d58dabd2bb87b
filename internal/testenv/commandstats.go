package testenv

import (
	"context"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// CommandCalls returns the calls of each command the Redis server behind c
// has run, by lowercase command name, from INFO commandstats (which counts
// the commands a script runs as well as the script's EVALSHA). It fails tb
// when the reply cannot be read.
func CommandCalls(tb testing.TB, c goredis.UniversalClient) map[string]int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("testenv: INFO commandstats: %v", err)
	}
	calls := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		n, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			tb.Fatalf("testenv: commandstats line %q: %v", line, err)
		}
		calls[strings.TrimPrefix(name, "cmdstat_")] = v
	}
	return calls
}
