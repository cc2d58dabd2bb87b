package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// countingObserver counts RPCs by kind and outcome and broadcasts.
type countingObserver struct {
	NopObserver
	mu        sync.Mutex
	rpcs      map[string]int
	refused   map[RefuseReason]int
	sent, got atomic.Int64
}

func (c *countingObserver) RPC(kind Kind, out Outcome, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rpcs == nil {
		c.rpcs = map[string]int{}
	}
	c.rpcs[string(kind)+"/"+string(out)]++
}

func (c *countingObserver) count(kind Kind, out Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rpcs[string(kind)+"/"+string(out)]
}

func (c *countingObserver) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.rpcs {
		n += v
	}
	return n
}

func (c *countingObserver) Refused(r RefuseReason) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused == nil {
		c.refused = map[RefuseReason]int{}
	}
	c.refused[r]++
}

func (c *countingObserver) refusals(r RefuseReason) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused[r]
}

func (c *countingObserver) BroadcastSent()     { c.sent.Add(1) }
func (c *countingObserver) BroadcastReceived() { c.got.Add(1) }

// recordingMerger records the highest merged total per cell.
type recordingMerger struct {
	mu    sync.Mutex
	cells map[origin.Cell]int64
}

func (m *recordingMerger) MergeRemote(c origin.Cell, total int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cells == nil {
		m.cells = map[origin.Cell]int64{}
	}
	m.cells[c] = max(m.cells[c], total)
}

func (m *recordingMerger) get(c origin.Cell) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cells[c]
}

// testNode is one Origin serving its peer RPC on an h2c httptest server.
type testNode struct {
	o      *Origin
	srv    *httptest.Server
	obs    *countingObserver
	merger *recordingMerger
	down   atomic.Bool // the RPC answers 503
	rpc    atomic.Pointer[http.Handler]
}

// newTestCluster starts n nodes that know each other, and wires their
// exceed broadcasts to each other directly (no gossip).
func newTestCluster(t testing.TB, n int, secret string) []*testNode {
	t.Helper()
	return newTestClusterWith(t, n, Config{Secret: secret})
}

// newTestClusterWith is newTestCluster with every node's Config based on
// base (ID, Observer and a default Timeout filled in).
func newTestClusterWith(t testing.TB, n int, base Config) []*testNode {
	t.Helper()
	nodes := make([]*testNode, n)
	for i := range nodes {
		obs := &countingObserver{}
		cfg := base
		cfg.ID, cfg.Observer = fmt.Sprintf("node-%d", i), obs
		if cfg.Timeout == 0 {
			cfg.Timeout = time.Second
		}
		o, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		path, h := o.Handler()
		nd := &testNode{o: o, obs: obs}
		nd.rpc.Store(&h)
		mux := http.NewServeMux()
		mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if nd.down.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			(*nd.rpc.Load()).ServeHTTP(w, r)
		}))
		srv := httptest.NewUnstartedServer(mux)
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetHTTP1(true)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		srv.Start()
		m := &recordingMerger{}
		o.OnPush(m.MergeRemote)
		nd.srv, nd.merger = srv, m
		nodes[i] = nd
		t.Cleanup(func() { srv.Close(); o.Close() })
	}
	all := membersOf(nodes...)
	for _, nd := range nodes {
		nd.o.SetPeers(all)
		nd.o.setBroadcaster(func(e exceed) {
			for _, other := range nodes {
				if other != nd {
					other.o.receive(e)
				}
			}
		})
	}
	return nodes
}

// membersOf returns how to reach each of nodes.
func membersOf(nodes ...*testNode) map[string]Member {
	m := make(map[string]Member, len(nodes))
	for _, nd := range nodes {
		m[nd.o.ID()] = Member{RPC: nd.srv.URL, Incarnation: nd.o.Incarnation()}
	}
	return m
}

func key(id string) origin.Key {
	return origin.Key{Workspace: "ws", Namespace: "ns", Identifier: id, Duration: time.Minute}
}

// TestOriginMatchesOneStore runs random Load, Apply and Decide calls on
// random nodes of a 3-node cluster and on one memory.Store: every answer
// must be the same, whichever node the call went through.
func TestOriginMatchesOneStore(t *testing.T) {
	nodes := newTestCluster(t, 3, "secret")
	ref := memory.New(nil)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 9))
	const seq = 1000
	for step := range 2000 {
		nd := nodes[rng.IntN(len(nodes))].o
		k := key(fmt.Sprintf("id-%d", rng.IntN(40)))
		switch rng.IntN(3) {
		case 0:
			got, err1 := nd.Load(ctx, k, seq)
			want, err2 := ref.Load(ctx, k, seq)
			if err1 != nil || err2 != nil || got != want {
				t.Fatalf("step %d: Load %v (%v), want %v (%v)", step, got, err1, want, err2)
			}
		case 1:
			deltas := []origin.Delta{
				add(origin.Cell{Key: k, Sequence: seq}, rng.Int64N(5)+1),
				add(origin.Cell{Key: key(fmt.Sprintf("id-%d", rng.IntN(40))), Sequence: seq - 1}, rng.Int64N(5)+1),
				add(origin.Cell{Key: k, Sequence: seq}, 1),
			}
			got, err1 := nd.Apply(ctx, deltas)
			want, err2 := ref.Apply(ctx, deltas)
			if err1 != nil || err2 != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d: Apply %v (%v), want %v (%v)", step, got, err1, want, err2)
			}
		default:
			c := origin.Check{Key: k, Seq: seq, Elapsed: rng.Int64N(60_000), Writer: newWriter(), Sent: rng.Int64N(3),
				Asks: []origin.Ask{{Limit: 60, Cost: 1}, {Limit: 60, Cost: 3}}}
			got, err1 := nd.Decide(ctx, c)
			want, err2 := ref.Decide(ctx, c)
			if err1 != nil || err2 != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d: Decide %v (%v), want %v (%v)", step, got, err1, want, err2)
			}
		}
	}
}

// TestOwnIdentitiesNeedNoRPC checks that calls for identities a node owns
// never leave it, and calls for the others go to their owner.
func TestOwnIdentitiesNeedNoRPC(t *testing.T) {
	nodes := newTestCluster(t, 3, "secret")
	nd := nodes[0]
	ctx := context.Background()
	var own, other origin.Key
	for i := 0; own.Duration == 0 || other.Duration == 0; i++ {
		k := key(fmt.Sprintf("u%d", i))
		if nd.o.Ring().Owner(k) == nd.o.ID() {
			own = k
		} else {
			other = k
		}
	}
	for _, k := range []origin.Key{own, other} {
		before := nd.obs.total()
		if _, err := nd.o.Load(ctx, k, 5); err != nil {
			t.Fatal(err)
		}
		if _, err := nd.o.Apply(ctx, []origin.Delta{add(origin.Cell{Key: k, Sequence: 5}, 2)}); err != nil {
			t.Fatal(err)
		}
		if _, err := nd.o.Decide(ctx, origin.Check{Key: k, Seq: 5, Asks: []origin.Ask{{Limit: 10, Cost: 1}}}); err != nil {
			t.Fatal(err)
		}
		rpcs := nd.obs.total() - before
		if want := map[bool]int{true: 0, false: 3}[k == own]; rpcs != want {
			t.Errorf("owned %v: %d RPCs, want %d", k == own, rpcs, want)
		}
	}
}

// TestReplaysForgetStaleBuckets checks that a nonce is refused a second time
// while its timestamp is accepted, and that the buckets of timestamps no
// longer accepted are dropped as new ones open.
func TestReplaysForgetStaleBuckets(t *testing.T) {
	r := newReplays()
	const t0 = 1_800_000_000_000
	if !r.claim(t0, "a", t0) || r.claim(t0, "a", t0+maxSkew.Milliseconds()) {
		t.Fatal("a nonce must be taken once within the accepted window")
	}
	if !r.claim(t0, "b", t0) {
		t.Fatal("another nonce with the same timestamp must be taken")
	}
	later := t0 + 3*maxSkew.Milliseconds()
	if !r.claim(later, "c", later) {
		t.Fatal("a new call must be taken")
	}
	if n := len(r.buckets); n != 1 {
		t.Errorf("%d buckets after the first went stale, want 1", n)
	}
}

// TestUnreachableOwner checks that Apply parks the deltas of an owner that
// is down and delivers the others', that once the owner's breaker is open
// its runner-up stands in for it (and gets the parked deltas), and that the
// owner is seeded with them once it is back.
func TestUnreachableOwner(t *testing.T) {
	nodes := newTestCluster(t, 2, "s")
	a, b := nodes[0], nodes[1]
	ctx := context.Background()
	var mine, theirs origin.Key
	for i := 0; mine.Duration == 0 || theirs.Duration == 0; i++ {
		k := key(fmt.Sprintf("u%d", i))
		if a.o.Ring().Owner(k) == a.o.ID() {
			mine = k
		} else {
			theirs = k
		}
	}
	seq := time.Now().UnixMilli() / time.Minute.Milliseconds()
	b.down.Store(true)

	if _, err := a.o.Load(ctx, theirs, seq); !errors.Is(err, origin.ErrUnavailable) {
		t.Fatalf("Load at a down owner: %v, want ErrUnavailable", err)
	}
	deltas := []origin.Delta{add(origin.Cell{Key: mine, Sequence: seq}, 2), add(origin.Cell{Key: theirs, Sequence: seq}, 3)}
	totals, err := a.o.Apply(ctx, deltas)
	var cells *origin.CellErrors
	if !errors.As(err, &cells) || len(cells.Failed) != 1 || !errors.Is(cells.Failed[1], origin.ErrUnavailable) || totals[0].Count != 2 || totals[1].Count != 0 {
		t.Fatalf("Apply with one owner down: %v %v, want [2 0] and delta 1 unavailable", totals, err)
	}
	if _, err := a.o.Apply(ctx, deltas[1:]); !errors.Is(err, origin.ErrUnavailable) {
		t.Fatalf("Apply with every owner down: %v, want ErrUnavailable", err)
	}
	// Three failures opened b's breaker: a, the runner-up, stands in for b
	// with no RPC, and takes the delta when the limiter sends it again.
	if a.obs.count(KindApply, OutcomeUnavailable)+a.obs.count(KindLoad, OutcomeUnavailable) < 3 {
		t.Fatalf("calls to the down owner: %v", a.obs.rpcs)
	}
	rpcs := a.obs.total()
	start := time.Now()
	got, err := a.o.Load(ctx, theirs, seq)
	if err != nil || a.obs.total() != rpcs {
		t.Fatalf("Load with the owner's breaker open: %v %v after %d RPCs, want a local answer", got, err, a.obs.total()-rpcs)
	}
	if el := time.Since(start); el > 50*time.Millisecond {
		t.Errorf("a call with the owner's breaker open took %v", el)
	}
	if totals, err := a.o.Apply(ctx, deltas[1:]); err != nil || totals[0].Count != 3 {
		t.Fatalf("the delta sent again to the stand-in: %v %v, want [3]", totals, err)
	}

	// Once b answers again (a call probes it after the breaker's open
	// timeout), its identities go back to it, seeded with what a holds.
	b.down.Store(false)
	time.Sleep(1100 * time.Millisecond)
	waitFor(t, 5*time.Second, "the owner seeded after recovery", func() bool {
		_, _ = a.o.Load(ctx, theirs, seq) // the probe
		got, err := b.o.Load(ctx, theirs, seq)
		return err == nil && got.Current == 3
	})
	time.Sleep(1500 * time.Millisecond) // a later flush must not send it twice
	if got, err := b.o.Load(ctx, theirs, seq); err != nil || got.Current != 3 {
		t.Errorf("owner's count after recovery: %v %v, want 3 (the parked delta, once)", got, err)
	}
}

// TestBroadcastOnExceed checks that an owner that denies a request merges
// the counter's totals into every node, once per new total.
func TestBroadcastOnExceed(t *testing.T) {
	nodes := newTestCluster(t, 3, "s")
	ctx := context.Background()
	k := key("hot")
	caller := nodes[0]
	for _, nd := range nodes {
		if nd.o.Ring().Owner(k) != nd.o.ID() {
			caller = nd
		}
	}
	c := origin.Check{Key: k, Seq: 9, Asks: []origin.Ask{{Limit: 5, Cost: 3}, {Limit: 5, Cost: 3}}}
	v, err := caller.o.Decide(ctx, c)
	if err != nil || v.Admitted[0] != true || v.Admitted[1] != false {
		t.Fatalf("Decide: %+v %v", v, err)
	}
	for i, nd := range nodes {
		if got := nd.merger.get(origin.Cell{Key: k, Sequence: 9}); got != 3 {
			t.Errorf("node %d merged %d, want 3", i, got)
		}
	}
	var sent int64
	for _, nd := range nodes {
		sent += nd.obs.sent.Load()
	}
	_, _ = caller.o.Decide(ctx, c) // denies both at the same total: no new broadcast
	var again int64
	for _, nd := range nodes {
		again += nd.obs.sent.Load()
	}
	if sent != 1 || again != 1 {
		t.Errorf("broadcasts: %d then %d, want 1 and 1", sent, again)
	}
	// Increments that land after the exceed (a replay that was in flight)
	// are broadcast with the new total.
	if _, err := caller.o.Apply(ctx, []origin.Delta{add(origin.Cell{Key: k, Sequence: 9}, 2)}); err != nil {
		t.Fatal(err)
	}
	for i, nd := range nodes {
		if got := nd.merger.get(origin.Cell{Key: k, Sequence: 9}); got != 5 {
			t.Errorf("node %d merged %d after a late increment, want 5", i, got)
		}
	}
}

// TestRehomeSeedsNewOwner checks that when a member dies, the survivors
// seed the new owners of its cells with the totals they saw.
func TestRehomeSeedsNewOwner(t *testing.T) {
	ctx := context.Background()
	checkRehome(t, 20, func(nodes []*testNode, i int, cell origin.Cell) error {
		_, err := nodes[i%2].o.Apply(ctx, []origin.Delta{add(cell, int64(10+i))})
		return err
	}, func(i int, got origin.Counts) (bool, string) {
		return got.Current == int64(10+i), fmt.Sprintf("a total of %d", 10+i)
	})
}

// TestRehomeSeedsImportedCounts checks that the seed of a moved cell
// carries the other regions' count the owner held of it (its imported
// count), as the survivors saw it in their replies, not only its total.
func TestRehomeSeedsImportedCounts(t *testing.T) {
	ctx := context.Background()
	checkRehome(t, 10, func(nodes []*testNode, i int, cell origin.Cell) error {
		if err := nodes[0].o.Import(ctx, []origin.Import{{Cell: cell, Counts: []origin.RegionCount{{Region: "eu", Count: int64(30 + i)}}}}); err != nil {
			return err
		}
		_, err := nodes[i%2].o.Apply(ctx, []origin.Delta{add(cell, 1)})
		return err
	}, func(i int, got origin.Counts) (bool, string) {
		return got.Current == 1 && got.Imported.Current == int64(30+i), fmt.Sprintf("a total of 1 and %d imported", 30+i)
	})
}

// checkRehome starts three members, writes (with write, through the first
// two) n cells that the third owns, stops the third, and waits up to 5 s
// for each cell's counts at its new owner to be what want says.
func checkRehome(t *testing.T, n int, write func(nodes []*testNode, i int, cell origin.Cell) error,
	want func(i int, got origin.Counts) (ok bool, what string)) {
	t.Helper()
	nodes := newTestCluster(t, 3, "s")
	ctx := context.Background()
	dead := nodes[2]
	seq := time.Now().UnixMilli() / time.Minute.Milliseconds()
	var moved []origin.Key
	for i := 0; len(moved) < n; i++ {
		k := key(fmt.Sprintf("u%d", i))
		if nodes[0].o.Ring().Owner(k) == dead.o.ID() {
			moved = append(moved, k)
		}
	}
	for i, k := range moved {
		if err := write(nodes, i, origin.Cell{Key: k, Sequence: seq}); err != nil {
			t.Fatal(err)
		}
	}
	dead.srv.Close()
	alive := membersOf(nodes[0], nodes[1])
	for _, nd := range nodes[:2] {
		nd.o.SetPeers(alive)
	}
	deadline := time.Now().Add(5 * time.Second)
	for i, k := range moved {
		for {
			got, err := nodes[0].o.Load(ctx, k, seq)
			ok, what := want(i, got)
			if err == nil && ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("identity %d at its new owner: %+v %v, want %s", i, got, err, what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestRehomeDriven checks that with RehomeTicks a ring change hands no cell
// over until Rehome runs, and that Rehome then seeds the new owner on the
// caller's goroutine, reports how many cells it seeded, and does nothing
// more when called again.
func TestRehomeDriven(t *testing.T) {
	nodes := newTestClusterWith(t, 3, Config{Secret: "s", RehomeTicks: make(chan time.Time)})
	ctx := context.Background()
	dead := nodes[2]
	seq := time.Now().UnixMilli() / time.Minute.Milliseconds()
	var k origin.Key
	for i := 0; ; i++ {
		if k = key(fmt.Sprintf("u%d", i)); nodes[0].o.Ring().Owner(k) == dead.o.ID() {
			break
		}
	}
	if _, err := nodes[0].o.Apply(ctx, []origin.Delta{add(origin.Cell{Key: k, Sequence: seq}, 7)}); err != nil {
		t.Fatal(err)
	}
	dead.srv.Close()
	alive := membersOf(nodes[0], nodes[1])
	for _, nd := range nodes[:2] {
		nd.o.SetPeers(alive)
	}
	if got, err := nodes[0].o.Load(ctx, k, seq); err != nil || got.Current != 0 {
		t.Fatalf("new owner before Rehome: %v %v, want 0: nothing moves until Rehome", got, err)
	}
	if n := nodes[1].o.Rehome(); n != 0 {
		t.Errorf("Rehome on a node that saw 0 of the moved cell seeded %d cells", n)
	}
	if n := nodes[0].o.Rehome(); n != 1 {
		t.Errorf("Rehome seeded %d cells, want 1", n)
	}
	if got, err := nodes[0].o.Load(ctx, k, seq); err != nil || got.Current != 7 {
		t.Fatalf("new owner after Rehome: %v %v, want 7", got, err)
	}
	if n := nodes[0].o.Rehome(); n != 0 {
		t.Errorf("a second Rehome with no change seeded %d cells, want 0", n)
	}
}

// TestKeysCrossTheWireUnchanged: names that are not valid UTF-8, which JSON
// would turn into U+FFFD, reach their owner byte for byte, so two such
// counters stay two.
func TestKeysCrossTheWireUnchanged(t *testing.T) {
	nodes := newTestCluster(t, 2, "s")
	a, b := nodes[0], nodes[1]
	ctx := context.Background()
	seq := time.Now().UnixMilli() / time.Minute.Milliseconds()
	var keys []origin.Key
	for i := 0; len(keys) < 2; i++ {
		k := origin.Key{Workspace: "w\xff", Namespace: "n", Identifier: fmt.Sprintf("\xfe%d\xff", i), Duration: time.Minute}
		if a.o.Ring().Owner(k) == b.o.ID() {
			keys = append(keys, k)
		}
	}
	w := newWriter()
	for i, k := range keys {
		if _, err := a.o.Apply(ctx, []origin.Delta{{Cell: origin.Cell{Key: k, Sequence: seq}, Writer: w, Sent: int64(3 + 2*i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range keys {
		want := int64(3 + 2*i)
		if c, err := a.o.Load(ctx, k, seq); err != nil || c.Current != want {
			t.Errorf("Load(%q) at a = %d, %v; want %d", k.Identifier, c.Current, err, want)
		}
		if c, _ := b.o.store.Load(ctx, k, seq); c.Current != want {
			t.Errorf("the owner holds %d under %q, want %d", c.Current, k.Identifier, want)
		}
	}
}
