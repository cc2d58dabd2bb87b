package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	mathrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/origin"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestMain fails the package if any goroutine outlives the tests: every
// client, proxy and miniredis server a test starts is closed by the test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newTestClient returns a client for addr, closed when t ends. Retries are
// off so that fault tests count exactly the calls they make.
func newTestClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           time.Second,
		PoolSize:              8,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// realRedis returns a client for the test Redis server (internal/testenv).
func realRedis(t testing.TB) *goredis.Client {
	t.Helper()
	return newTestClient(t, testenv.RedisAddr(t))
}

// workspace returns a workspace name unique to this test run, so tests can
// share the Redis server with other tests without flushing it.
func workspace(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strings.ReplaceAll(t.Name(), "/", "_") + "-" + hex.EncodeToString(b[:])
}

// newOrigin builds an Origin for cfg, closed when t ends.
func newOrigin(t testing.TB, cfg Config) *Origin {
	t.Helper()
	o, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = o.Close() })
	return o
}

// recorder is a MasterObserver that keeps everything it sees.
type recorder struct {
	mu          sync.Mutex
	calls       []Call
	transitions [][2]BreakerState
	masters     map[string][][2]BreakerState
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

func (r *recorder) MasterBreakerChanged(master string, from, to BreakerState) {
	r.mu.Lock()
	if r.masters == nil {
		r.masters = map[string][][2]BreakerState{}
	}
	r.masters[master] = append(r.masters[master], [2]BreakerState{from, to})
	r.mu.Unlock()
}

// masterStates returns the breaker changes of each master.
func (r *recorder) masterStates() map[string][][2]BreakerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][][2]BreakerState, len(r.masters))
	for m, st := range r.masters {
		out[m] = slices.Clone(st)
	}
	return out
}

// callsTo returns the calls observed that went to master, and all calls.
func (r *recorder) callsTo(master string) (to, all int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if c.Master == master {
			to++
		}
	}
	return to, len(r.calls)
}

// byMaster returns the calls observed by master ("" on a client of one
// server) and outcome.
func (r *recorder) byMaster() map[string]map[Outcome]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]map[Outcome]int{}
	for _, c := range r.calls {
		if m[c.Master] == nil {
			m[c.Master] = map[Outcome]int{}
		}
		m[c.Master][c.Outcome]++
	}
	return m
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

func (r *recorder) states() [][2]BreakerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][2]BreakerState(nil), r.transitions...)
}

// cmdCounter is a go-redis hook that counts the commands a client sends
// (each pipelined command counts once).
type cmdCounter struct{ n atomic.Int64 }

func (h *cmdCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *cmdCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *cmdCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// eventually polls cond every 20ms until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}

// realRedisAddr returns the address of the test Redis server.
func realRedisAddr(t testing.TB) string {
	t.Helper()
	return testenv.RedisAddr(t)
}

// newWriter returns a writer of its own for a test: its first write of n
// adds n.
func newWriter() origin.Writer { return origin.Writer(mathrand.Uint64()) }

// add returns a delta that adds n to cell c: the first write of a new
// writer.
func add(c origin.Cell, n int64) origin.Delta {
	return origin.Delta{Cell: c, Writer: newWriter(), Sent: n}
}
