package redis

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice/origin"
)

func TestConfigValidate(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"client only", Config{Client: client}, true},
		{"no client", Config{}, false},
		{"negative timeout", Config{Client: client, Timeout: -1}, false},
		{"negative min TTL", Config{Client: client, MinTTL: -time.Second}, false},
		{"sub-ms min TTL", Config{Client: client, MinTTL: time.Microsecond}, false},
		{"ratio above 1", Config{Client: client, Breaker: BreakerConfig{FailureRatio: 1.5}}, false},
		{"negative ratio", Config{Client: client, Breaker: BreakerConfig{FailureRatio: -0.1}}, false},
		{"negative window", Config{Client: client, Breaker: BreakerConfig{Window: -time.Second}}, false},
		{"negative open timeout", Config{Client: client, Breaker: BreakerConfig{OpenTimeout: -time.Second}}, false},
		{"everything set", Config{Client: client, Timeout: time.Second, MinTTL: time.Minute, Breaker: BreakerConfig{
			ConsecutiveFailures: 3, FailureRatio: 1, MinRequests: 5, Window: time.Second, OpenTimeout: time.Second, HalfOpenProbes: 2,
		}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			if _, err := New(tc.cfg); (err == nil) != tc.ok {
				t.Fatalf("New() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	d := Config{Client: client}.withDefaults()
	if d.Timeout != 250*time.Millisecond || d.Breaker.ConsecutiveFailures != 5 || d.Breaker.OpenTimeout > 5*time.Second {
		t.Fatalf("defaults = %+v", d)
	}
}

func TestReadyToTrip(t *testing.T) {
	trip := readyToTrip(Config{}.withDefaults().Breaker)
	tests := []struct {
		name string
		c    gobreaker.Counts
		want bool
	}{
		{"4 consecutive", gobreaker.Counts{TotalFailures: 4, ConsecutiveFailures: 4}, false},
		{"5 consecutive", gobreaker.Counts{TotalFailures: 5, ConsecutiveFailures: 5}, true},
		{"half failed, too few calls", gobreaker.Counts{TotalSuccesses: 9, TotalFailures: 9, ConsecutiveFailures: 1}, false},
		{"half failed of 20", gobreaker.Counts{TotalSuccesses: 10, TotalFailures: 10, ConsecutiveFailures: 1}, true},
		{"40% failed of 50", gobreaker.Counts{TotalSuccesses: 30, TotalFailures: 20, ConsecutiveFailures: 2}, false},
		{"exclusions do not count", gobreaker.Counts{TotalSuccesses: 5, TotalFailures: 4, TotalExclusions: 30, ConsecutiveFailures: 1}, false},
	}
	for _, tc := range tests {
		if got := trip(tc.c); got != tc.want {
			t.Errorf("%s: trip(%+v) = %v, want %v", tc.name, tc.c, got, tc.want)
		}
	}
}

func TestLoadApply(t *testing.T) {
	t.Parallel()
	client := realRedis(t)
	o := newOrigin(t, Config{Client: client})
	ctx := context.Background()
	ws := workspace(t)
	key := func(id string) origin.Key {
		return origin.Key{Workspace: ws, Namespace: "ns", Identifier: id, Duration: time.Minute}
	}
	cell := func(id string, seq int64) origin.Cell { return origin.Cell{Key: key(id), Sequence: seq} }

	steps := []struct {
		name   string
		deltas []origin.Delta
		want   []int64
		load   map[string][2]int64 // id → {current (seq 10), previous (seq 9)}
	}{
		{name: "missing keys are zero", load: map[string][2]int64{"a": {0, 0}}},
		{
			name:   "first increments",
			deltas: []origin.Delta{add(cell("a", 10), 3), add(cell("a", 9), 7), add(cell("b", 10), 1)},
			want:   []int64{3, 7, 1},
			load:   map[string][2]int64{"a": {3, 7}, "b": {1, 0}, "c": {0, 0}},
		},
		{
			name:   "totals accumulate, in order within one batch",
			deltas: []origin.Delta{add(cell("a", 10), 2), add(cell("a", 10), 5), add(cell("b", 10), 0)},
			want:   []int64{5, 10, 1},
			load:   map[string][2]int64{"a": {10, 7}, "b": {1, 0}},
		},
		{name: "empty batch", deltas: []origin.Delta{}, want: []int64{}},
	}
	for _, s := range steps {
		if s.deltas != nil {
			got, err := o.Apply(ctx, s.deltas)
			if err != nil {
				t.Fatalf("%s: Apply: %v", s.name, err)
			}
			if len(got) != len(s.want) {
				t.Fatalf("%s: Apply = %v, want %v", s.name, got, s.want)
			}
			for i := range got {
				if got[i].Count != s.want[i] {
					t.Fatalf("%s: Apply = %v, want %v", s.name, got, s.want)
				}
			}
		}
		for id, want := range s.load {
			c, err := o.Load(ctx, key(id), 10)
			if err != nil {
				t.Fatalf("%s: Load(%s): %v", s.name, id, err)
			}
			if c.Current != want[0] || c.Previous != want[1] {
				t.Fatalf("%s: Load(%s) = %+v, want %v", s.name, id, c, want)
			}
		}
	}
}

func TestApplySetsTTL(t *testing.T) {
	t.Parallel()
	client := realRedis(t)
	o := newOrigin(t, Config{Client: client, MinTTL: 5 * time.Second})
	ctx := context.Background()
	ws := workspace(t)
	tests := []struct {
		name     string
		duration time.Duration
		minTTL   time.Duration // expected lower bound of PTTL right after Apply
		maxTTL   time.Duration
	}{
		{"one minute: 3 windows", time.Minute, 3*time.Minute - 5*time.Second, 3 * time.Minute},
		{"one day: 3 windows", 24 * time.Hour, 72*time.Hour - 5*time.Second, 72 * time.Hour},
		{"10ms: MinTTL floor", 10 * time.Millisecond, 4 * time.Second, 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := origin.Cell{Key: origin.Key{Workspace: ws, Namespace: "ttl", Identifier: tc.name, Duration: tc.duration}, Sequence: 42}
			for i := range 3 { // the expiry is set by the first increment and kept
				if _, err := o.Apply(ctx, []origin.Delta{add(c, 1)}); err != nil {
					t.Fatalf("Apply %d: %v", i, err)
				}
				ttl, err := client.PTTL(ctx, CellKey(c)).Result()
				if err != nil {
					t.Fatal(err)
				}
				if ttl < tc.minTTL || ttl > tc.maxTTL {
					t.Fatalf("after Apply %d: PTTL = %v, want in [%v, %v]", i, ttl, tc.minTTL, tc.maxTTL)
				}
			}
		})
	}
}

// TestApplyExpiryIsAtomic checks, from Redis' own records, that no cell key
// ever exists without an expiry: the script's effects replicate as one
// MULTI/EXEC, and a concurrent observer never sees a key with PTTL -1.
func TestApplyExpiryIsAtomic(t *testing.T) {
	t.Parallel()
	client := realRedis(t)
	o := newOrigin(t, Config{Client: client})
	ctx := context.Background()
	ws := workspace(t)
	const cells = 200
	deltas := make([]origin.Delta, cells)
	for i := range deltas {
		deltas[i] = add(origin.Cell{Key: origin.Key{Workspace: ws, Namespace: "atomic", Identifier: string(rune('a' + i%26)), Duration: time.Minute}, Sequence: int64(i)}, 1)
	}
	stop := make(chan struct{})
	var noTTL []string
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, d := range deltas[:20] {
				if client.PTTL(ctx, CellKey(d.Cell)).Val() == -1*time.Nanosecond { // go-redis reports -1 as -1ns
					noTTL = append(noTTL, CellKey(d.Cell))
				}
			}
		}
	})
	for range 5 {
		if _, err := o.Apply(ctx, deltas); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	if len(noTTL) > 0 {
		t.Fatalf("keys seen without expiry: %q", noTTL[:min(5, len(noTTL))])
	}
	for _, d := range deltas {
		if ttl := client.PTTL(ctx, CellKey(d.Cell)).Val(); ttl <= 0 {
			t.Fatalf("%q: PTTL %v", CellKey(d.Cell), ttl)
		}
	}
}

func TestConcurrentApplyTotals(t *testing.T) {
	t.Parallel()
	client := realRedis(t)
	o := newOrigin(t, Config{Client: client})
	ctx := context.Background()
	c := origin.Cell{Key: origin.Key{Workspace: workspace(t), Namespace: "n", Identifier: "hot", Duration: time.Minute}, Sequence: 1}
	const workers, rounds = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range rounds {
				if _, err := o.Apply(ctx, []origin.Delta{add(c, 1), add(c, 2)}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := o.Load(ctx, c.Key, c.Sequence)
	if err != nil || got.Current != workers*rounds*3 {
		t.Fatalf("Load = %+v, %v; want current %d", got, err, workers*rounds*3)
	}
}

func TestInvalidCells(t *testing.T) {
	t.Parallel()
	client := newTestClient(t, "127.0.0.1:1") // never contacted
	rec := &recorder{}
	o := newOrigin(t, Config{Client: client, Observer: rec})
	ctx := context.Background()
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond, 1500 * time.Microsecond} {
		k := origin.Key{Namespace: "n", Identifier: "i", Duration: d}
		if _, err := o.Load(ctx, k, 1); !errors.Is(err, ErrInvalidCell) {
			t.Errorf("Load with duration %v: %v, want ErrInvalidCell", d, err)
		}
		if _, err := o.Apply(ctx, []origin.Delta{add(origin.Cell{Key: k}, 1)}); !errors.Is(err, ErrInvalidCell) {
			t.Errorf("Apply with duration %v: %v, want ErrInvalidCell", d, err)
		}
	}
	if n := len(rec.outcomes()); n != 0 {
		t.Fatalf("invalid cells reached the breaker: %v", rec.outcomes())
	}
}

func TestBadValueIsNotAnOutage(t *testing.T) {
	t.Parallel()
	client := realRedis(t)
	rec := &recorder{}
	o := newOrigin(t, Config{Client: client, Observer: rec, Breaker: BreakerConfig{ConsecutiveFailures: 2}})
	ctx := context.Background()
	c := origin.Cell{Key: origin.Key{Workspace: workspace(t), Namespace: "n", Identifier: "i", Duration: time.Minute}, Sequence: 5}
	if err := client.Set(ctx, CellKey(c), "not a number", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := o.Load(ctx, c.Key, c.Sequence); !errors.Is(err, ErrBadValue) || errors.Is(err, origin.ErrUnavailable) {
			t.Fatalf("Load: %v, want ErrBadValue and not ErrUnavailable", err)
		}
		_, err := o.Apply(ctx, []origin.Delta{add(c, 1)})
		if err == nil || errors.Is(err, origin.ErrUnavailable) || !strings.HasPrefix(err.Error(), "redis: apply: ") {
			t.Fatalf("Apply on a string: %v", err)
		}
	}
	if s := o.BreakerState(); s != BreakerClosed {
		t.Fatalf("breaker %v after error replies, want closed", s)
	}
	if got := rec.outcomes()[OutcomeError]; got != 10 {
		t.Fatalf("outcomes %v, want 10 errors", rec.outcomes())
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	client := realRedis(t)
	o := newOrigin(t, Config{Client: client})
	k := origin.Key{Workspace: workspace(t), Namespace: "n", Identifier: "i", Duration: time.Second}
	if _, err := o.Load(context.Background(), k, 1); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	_, err := o.Load(context.Background(), k, 1)
	if !errors.Is(err, ErrClosed) || !errors.Is(err, origin.ErrUnavailable) {
		t.Fatalf("Load after Close: %v", err)
	}
	// The client is the caller's and still works.
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("client closed by Origin.Close: %v", err)
	}
}

func TestWarnsWithoutContextTimeout(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	var buf strings.Builder
	var mu sync.Mutex
	h := slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil)
	if _, err := New(Config{Client: client, Logger: slog.New(h)}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "ContextTimeoutEnabled") {
		t.Fatalf("no warning logged: %q", buf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestNewClientFromURL(t *testing.T) {
	addr := realRedisAddr(t)
	tests := []struct {
		url     string
		kind    string // "client", "cluster", "failover", "" = error
		wantErr string
	}{
		{url: "redis://" + addr + "/0?dial_timeout=1s", kind: "client"},
		{url: "rediss://" + addr, kind: "client"},
		{url: "redis://" + addr + "?addr=127.0.0.1:7001", kind: "cluster"},
		{url: "redis://" + addr + "?cluster=true", kind: "cluster"},
		{url: "redis://" + addr + "?master_name=mymaster", kind: "failover"},
		{url: "http://" + addr, wantErr: "scheme"},
		{url: "redis://" + addr + "?cluster=maybe", wantErr: "cluster"},
		{url: "redis://" + addr + "?no_such_option=1", wantErr: "no_such_option"},
		{url: "redis://user:s3cret@host:bad", wantErr: "port"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			c, err := NewClient(tc.url)
			if tc.kind == "" {
				if err == nil {
					_ = c.Close()
					t.Fatal("no error")
				}
				if !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("error %q: want %q and no password", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			switch c := c.(type) {
			case *goredis.Client:
				if tc.kind != "client" && tc.kind != "failover" {
					t.Fatalf("got a single-node client, want %s", tc.kind)
				}
				if !c.Options().ContextTimeoutEnabled {
					t.Fatal("ContextTimeoutEnabled is off")
				}
			case *goredis.ClusterClient:
				if tc.kind != "cluster" || !c.Options().ContextTimeoutEnabled {
					t.Fatalf("cluster client for %s (ContextTimeoutEnabled %v)", tc.kind, c.Options().ContextTimeoutEnabled)
				}
			default:
				t.Fatalf("unexpected client %T", c)
			}
		})
	}
	// A plain URL talks to the real server.
	c, err := NewClient("redis://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := newOrigin(t, Config{Client: c})
	if _, err := o.Load(context.Background(), origin.Key{Workspace: workspace(t), Namespace: "n", Identifier: "i", Duration: time.Second}, 1); err != nil {
		t.Fatal(err)
	}
}
