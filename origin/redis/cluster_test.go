package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
)

// Tests against the real Redis Cluster of scripts/services.sh: three masters
// with one replica each on loopback. They skip when it is not running
// (outside CI).

// clusterClient returns a cluster client built from a --redis-url with every
// node as a seed, closed when t ends.
func clusterClient(t testing.TB) *goredis.ClusterClient {
	t.Helper()
	addrs := testenv.RedisClusterAddrs(t)
	url := "redis://" + addrs[0] + "?cluster=true"
	for _, a := range addrs[1:] {
		url += "&addr=" + a
	}
	c, err := NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	cc, ok := c.(*goredis.ClusterClient)
	if !ok {
		t.Fatalf("NewClient(%q) returned a %T, want a cluster client", url, c)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// masterOf returns the address of the master serving slot, and of one of
// its replicas.
func masterOf(t testing.TB, c *goredis.ClusterClient, slot int64) (master, replica string) {
	t.Helper()
	shards, err := c.ClusterShards(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start > slot || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
				switch {
				case n.Role == "master" && master == "":
					master = addr
				case n.Role == "replica" && replica == "":
					replica = addr
				}
			}
			if master == "" || replica == "" {
				t.Fatalf("slot %d is served by %+v: want a master and a replica", slot, sh.Nodes)
			}
			return master, replica
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return "", ""
}

// TestClusterOriginCalls runs Load, Apply and Decide on the cluster for
// identities spread over every master. Decide's script reads and writes
// both cells of an identity, which Redis Cluster allows only within one
// slot (CROSSSLOT otherwise): the hash tag puts them there.
func TestClusterOriginCalls(t *testing.T) {
	client := clusterClient(t)
	o := newOrigin(t, Config{Client: client})
	ctx := context.Background()
	ws := workspace(t)
	const d = time.Minute
	masters := map[string]int{}
	for i := range 30 {
		key := origin.Key{Workspace: ws, Namespace: "cluster", Identifier: "id-" + strconv.Itoa(i), Duration: d}
		cur, prev := origin.Cell{Key: key, Sequence: 1000}, origin.Cell{Key: key, Sequence: 999}
		slotCur, err := client.ClusterKeySlot(ctx, CellKey(cur)).Result()
		if err != nil {
			t.Fatal(err)
		}
		slotPrev, err := client.ClusterKeySlot(ctx, CellKey(prev)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slotCur != slotPrev {
			t.Fatalf("%s: cells in slots %d and %d", key.Identifier, slotCur, slotPrev)
		}
		master, _ := masterOf(t, client, slotCur)
		masters[master]++

		totals, err := o.Apply(ctx, []origin.Delta{add(prev, 40), add(cur, int64(i))})
		if err != nil {
			t.Fatalf("%s: Apply: %v", key.Identifier, err)
		}
		if totals[0].Count != 40 || totals[1].Count != int64(i) {
			t.Fatalf("%s: Apply totals %v, want [40 %d]", key.Identifier, totals, i)
		}
		counts, err := o.Load(ctx, key, cur.Sequence)
		if err != nil {
			t.Fatalf("%s: Load: %v", key.Identifier, err)
		}
		if counts != (origin.Counts{Current: int64(i), Previous: 40}) {
			t.Fatalf("%s: Load %+v, want {%d 40}", key.Identifier, counts, i)
		}
		// 15 s into the minute the previous cell weighs floor(40*45/60) = 30.
		c := origin.Check{Key: key, Seq: cur.Sequence, Elapsed: 15_000, Writer: newWriter(), Sent: 2,
			Asks: asks(50, 5, 50, 20, 50, 1)}
		want := wantVerdict(c, int64(i), 40)
		got, err := o.Decide(ctx, c)
		if err != nil {
			t.Fatalf("%s: Decide: %v", key.Identifier, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: Decide %+v, want %+v", key.Identifier, got, want)
		}
	}
	if len(masters) != 3 {
		t.Fatalf("30 identities landed on masters %v; want all three", masters)
	}
	t.Logf("identities per master: %v", masters)
}

// failover is a way to make the replica of a master take over its slots.
type failover struct {
	name string
	// start starts the failover and returns what ends the fault (nil: none).
	start func(t *testing.T, master, replica *goredis.Client) (end func())
	// lossless: the old master hands over every write (a manual failover
	// waits for the replica to catch up); a crashed master may lose the
	// writes it had not replicated yet.
	lossless bool
}

var failovers = []failover{
	{"CLUSTER FAILOVER", func(t *testing.T, _, replica *goredis.Client) func() {
		if err := replica.Do(context.Background(), "CLUSTER", "FAILOVER").Err(); err != nil {
			t.Fatalf("CLUSTER FAILOVER: %v", err)
		}
		return nil
	}, true},
	{"master hangs (SIGSTOP)", func(t *testing.T, master, _ *goredis.Client) func() {
		info, err := master.Info(context.Background(), "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(info, "process_id:")
		pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
		if err != nil {
			t.Fatalf("process_id in INFO server: %v", err)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP redis-server %d: %v", pid, err)
		}
		var once sync.Once
		end := func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
		t.Cleanup(end) // never leave a node of the shared cluster stopped
		return end
	}, false},
}

// TestClusterFailoverUnderLoad sends a steady load through a limiter on the
// cluster (20 counters under their limit, one counter in strict mode whose
// admissions the origin decides) and fails over the master that serves the
// strict counter while it runs: a manual CLUSTER FAILOVER, and a master that
// hangs until the cluster promotes its replica. No caller sees an error or a
// wait beyond the origin timeout (decisions go on locally); once the load
// stops and the limiter has flushed, Redis holds every admitted unit (more
// if a call whose reply was lost was replayed; a few less if the hung master
// had not replicated its last writes), and a fresh limiter reads what Redis
// holds. The cluster is healthy again before the test ends.
func TestClusterFailoverUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("fails over masters of the test cluster")
	}
	for _, fo := range failovers {
		t.Run(fo.name, func(t *testing.T) { testFailover(t, fo) })
	}
}

func testFailover(t *testing.T, fo failover) {
	client := clusterClient(t)
	rec := &recorder{}
	o := newOrigin(t, Config{Client: client, Observer: rec})
	const originTimeout = 250 * time.Millisecond
	l, err := sluice.New(sluice.Config{Origin: o, OriginTimeout: originTimeout, OriginBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	r := newFailoverRun(workspace(t))
	r.primeStrict(t, l)
	slot, err := client.ClusterKeySlot(ctx, CellKey(r.cell("strict"))).Result()
	if err != nil {
		t.Fatal(err)
	}
	masterAddr, replicaAddr := masterOf(t, client, slot)
	master := newTestClient(t, masterAddr)
	replica := newTestClient(t, replicaAddr)

	stopLoad := r.load(l, 4)
	defer stopLoad()
	time.Sleep(500 * time.Millisecond)
	failoverStart := time.Now()
	end := fo.start(t, master, replica)
	eventually(t, 15*time.Second, "the replica to become master", func() bool {
		role, err := replica.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
	took := time.Since(failoverStart)
	if end != nil {
		end()
	}
	time.Sleep(time.Second) // load goes on against the new master
	stopLoad()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	t.Logf("failover of slot %d: %s -> %s in %v; %d requests, slowest %v; origin calls by outcome %v",
		slot, masterAddr, replicaAddr, took.Round(time.Millisecond), r.requests.Load(), time.Duration(r.slowest.Load()), rec.outcomes())
	if n := r.errs.Load(); n > 0 {
		t.Errorf("%d requests failed during the failover", n)
	}
	if worst := time.Duration(r.slowest.Load()); worst > originTimeout+250*time.Millisecond {
		t.Errorf("a request took %v; origin calls are bounded by %v", worst, originTimeout)
	}
	eventually(t, 15*time.Second, "every node of the cluster to report cluster_state:ok", func() bool {
		for _, addr := range testenv.RedisClusterAddrs(t) {
			c := goredis.NewClient(&goredis.Options{Addr: addr})
			info, err := c.ClusterInfo(ctx).Result()
			_ = c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	r.checkConverged(t, client, o, fo.lossless)
}

// failoverRun is the load of testFailover: its counters (the strict one
// first) and what the limiter answered them.
type failoverRun struct {
	ws       string
	seq      int64
	ids      []string
	admitted []atomic.Int64 // by ids
	requests atomic.Int64
	errs     atomic.Int64
	slowest  atomic.Int64 // ns
}

// failoverWindow is the window of testFailover's counters.
const failoverWindow = time.Hour

func newFailoverRun(ws string) *failoverRun {
	ids := []string{"strict"}
	for i := range 20 {
		ids = append(ids, "user-"+strconv.Itoa(i))
	}
	return &failoverRun{
		ws: ws, ids: ids, admitted: make([]atomic.Int64, len(ids)),
		seq: time.Now().UnixMilli() / failoverWindow.Milliseconds(),
	}
}

func (r *failoverRun) req(id string, limit int64) sluice.Request {
	return sluice.Request{Workspace: r.ws, Namespace: "failover", Identifier: id, Limit: limit, Duration: failoverWindow, Cost: 1}
}

// cell returns the current cell of counter id.
func (r *failoverRun) cell(id string) origin.Cell {
	return origin.Cell{Key: origin.Key{Workspace: r.ws, Namespace: "failover", Identifier: id, Duration: failoverWindow}, Sequence: r.seq}
}

// primeStrict spends the strict counter's limit of 5 and has it denied
// once: with a higher limit, the origin then admits its requests.
func (r *failoverRun) primeStrict(t *testing.T, l *sluice.Limiter) {
	t.Helper()
	for i := range 6 {
		res, err := l.Ratelimit(context.Background(), r.req("strict", 5))
		if err != nil || res.Success != (i < 5) {
			t.Fatalf("priming request %d: %+v, %v", i, res, err)
		}
	}
	r.admitted[0].Store(5)
}

// load sends requests on random counters from workers goroutines until the
// returned function (idempotent) stops them and waits for them.
func (r *failoverRun) load(l *sluice.Limiter, workers int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for {
				select {
				case <-done:
					return
				default:
				}
				r.send(l, rng.IntN(len(r.ids)))
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	return sync.OnceFunc(func() { close(done); wg.Wait() })
}

// send sends one request on counter i and records its answer.
func (r *failoverRun) send(l *sluice.Limiter, i int) {
	began := time.Now()
	res, err := l.Ratelimit(context.Background(), r.req(r.ids[i], 1<<40))
	took := time.Since(began)
	for old := r.slowest.Load(); int64(took) > old && !r.slowest.CompareAndSwap(old, int64(took)); old = r.slowest.Load() {
	}
	r.requests.Add(1)
	if err != nil {
		r.errs.Add(1)
	} else if res.Success {
		r.admitted[i].Add(1)
	}
}

// checkConverged checks that Redis holds what was admitted (never more; a
// few units less only where the failover may lose writes) and that a fresh
// limiter reads it.
func (r *failoverRun) checkConverged(t *testing.T, client goredis.UniversalClient, o *Origin, lossless bool) {
	t.Helper()
	ctx := context.Background()
	fresh, err := sluice.New(sluice.Config{Origin: o})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	var lost int64
	for i, id := range r.ids {
		want := r.admitted[i].Load()
		var got int64
		eventually(t, 5*time.Second, id+" in Redis", func() bool {
			got, err = client.HGet(ctx, CellKey(r.cell(id)), totalField).Int64()
			return err == nil && (got >= want || !lossless)
		})
		switch {
		case got > want:
			// A write carries its writer's whole count, so one sent again
			// after a lost reply changes nothing: more is a double count.
			t.Errorf("%s: Redis holds %d for %d admitted: counted twice", id, got, want)
		case got < want:
			t.Logf("%s: Redis holds %d for %d admitted (writes the hung master had not replicated)", id, got, want)
			lost += want - got
		}
		peek := r.req(id, 1<<40)
		peek.Cost = 0
		res, err := fresh.Ratelimit(ctx, peek)
		if err != nil {
			t.Fatal(err)
		}
		if res.Current != got {
			t.Errorf("%s: a fresh limiter reads %d, Redis holds %d", id, res.Current, got)
		}
	}
	if total := r.requests.Load(); lost > total/100 {
		t.Errorf("Redis lost %d of %d admitted units", lost, total)
	}
	if r.admitted[0].Load() <= 5 {
		t.Errorf("the strict counter admitted nothing under load")
	}
}
