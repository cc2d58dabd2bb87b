package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/origintest"
)

// testClock is a clock a test moves by hand, shared by a cluster's nodes.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// regionCluster starts a cluster of three nodes on one hand-moved clock
// and returns them with the member that owns the region's key first.
func regionCluster(t *testing.T) (owner *testNode, others []*testNode, clock *testClock) {
	t.Helper()
	clock = &testClock{now: time.Now()}
	nodes := newTestClusterWith(t, 3, Config{Secret: "s", Clock: clock.Now})
	id := nodes[0].o.Ring().Owner(regionKey)
	for _, nd := range nodes {
		if nd.o.ID() == id {
			owner = nd
		} else {
			others = append(others, nd)
		}
	}
	return owner, others, clock
}

// TestRegionConformance runs the cases of origin.Region on a cluster of
// three nodes, from the member that holds the region's lease (its own
// store) and from one that does not (every lease and queue call over the
// peer RPC), each on a cluster of its own; the cells of the import cases are spread over the three
// members, so imports go to their owners and come back with the totals of
// Load, Apply and Decide over the RPC.
func TestRegionConformance(t *testing.T) {
	for _, tc := range []struct {
		name  string
		owner bool
	}{
		{"at the lease's owner", true},
		{"at another member", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner, others, clock := regionCluster(t) // a lease and a queue of its own
			at := others[0]
			if tc.owner {
				at = owner
			}
			origintest.Region(t, at.o, time.Second, func() { clock.advance(2 * time.Second) })
		})
	}
}

// TestOneLeaderPerRegion: the members of a cluster ask one member for the
// lease, so while one holds it the others do not, whichever they are; the
// nominations any member queues reach the leader, wherever it runs.
func TestOneLeaderPerRegion(t *testing.T) {
	owner, others, clock := regionCluster(t)
	ctx := context.Background()
	lead := func(nd *testNode) origin.Lease {
		t.Helper()
		l, err := nd.o.Lead(ctx, origin.LeaseRequest{Holder: nd.o.ID(), TTL: time.Second})
		if err != nil {
			t.Fatalf("Lead at %s: %v", nd.o.ID(), err)
		}
		return l
	}
	first := lead(others[0])
	if !first.Held {
		t.Fatalf("the first to ask did not get the lease: %+v", first)
	}
	for _, nd := range []*testNode{owner, others[1]} {
		if l := lead(nd); l.Held || l.Holder != others[0].o.ID() || l.Fence != first.Fence {
			t.Errorf("%s got %+v while %s holds the lease", nd.o.ID(), l, others[0].o.ID())
		}
	}
	cell := origin.Cell{Key: key("nominated"), Sequence: 1}
	for i, nd := range []*testNode{owner, others[1]} {
		if err := nd.o.Nominate(ctx, []origin.Nomination{{Cell: cell, Count: int64(i + 1)}}); err != nil {
			t.Fatal(err)
		}
	}
	ns, err := others[0].o.Nominated(ctx, 10)
	if err != nil || len(ns) != 2 || ns[0].Count != 1 || ns[1].Count != 2 {
		t.Fatalf("the leader took %+v, %v; want both members' nominations, oldest first", ns, err)
	}
	clock.advance(2 * time.Second)
	if l := lead(others[1]); !l.Held || l.Fence != first.Fence+1 {
		t.Errorf("after the lease lapsed: %+v, want it held with fence %d", l, first.Fence+1)
	}
}

// TestRegionCallsRefused checks the bounds and the ownership of the region's
// calls at the receiver: a malformed or oversized call gets 400, a lease
// or queue call at a member that does not own the region's key 409, and an
// import of a cell the receiver does not own is refused, not counted.
func TestRegionCallsRefused(t *testing.T) {
	owner, others, _ := regionCluster(t)
	from, notOwner := others[0], others[1]
	seq := time.Now().UnixMilli() / time.Minute.Milliseconds()
	many := make([]wireImport, maxCallCells+1)
	for i := range many {
		many[i] = wireImport{K: toWireKey(key("k")), S: seq}
	}
	regions := make([]wireRegionCount, maxImportRegions+1)
	for _, tc := range []struct {
		name string
		to   *testNode
		kind Kind
		req  any
		want int
	}{
		{"lead without a holder", owner, KindLead, leadRequest{TTL: 1000}, http.StatusBadRequest},
		{"lead with a holder too long", owner, KindLead, leadRequest{H: strings.Repeat("h", maxHolderBytes+1), TTL: 1000}, http.StatusBadRequest},
		{"lead without a TTL", owner, KindLead, leadRequest{H: "h"}, http.StatusBadRequest},
		{"lead at a member that does not own the lease", notOwner, KindLead, leadRequest{H: "h", TTL: 1000}, http.StatusConflict},
		{"nominate at a member that does not own the queue", notOwner, KindNominate, nominateRequest{}, http.StatusConflict},
		{"nominated at a member that does not own the queue", notOwner, KindNominated, nominatedRequest{Max: 1}, http.StatusConflict},
		{"nominated with a negative max", owner, KindNominated, nominatedRequest{Max: -1}, http.StatusBadRequest},
		{"nominate an invalid key", owner, KindNominate, nominateRequest{D: []wireNomination{{S: 1}}}, http.StatusBadRequest},
		{"import over the cells of a call", owner, KindImport, importRequest{D: many}, http.StatusBadRequest},
		{"import over the regions of a cell", owner, KindImport, importRequest{D: []wireImport{{K: toWireKey(key("k")), S: seq, C: regions}}}, http.StatusBadRequest},
		{"import a region's name too long", owner, KindImport, importRequest{D: []wireImport{{K: toWireKey(key("k")), S: seq,
			C: []wireRegionCount{{R: strings.Repeat("r", maxRegionBytes+1), N: 1}}}}}, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reply map[string]any
			if st := postSigned(t, from, tc.to, tc.kind, tc.req, &reply); st != tc.want {
				t.Errorf("status %d, want %d", st, tc.want)
			}
		})
	}
	t.Run("import of a cell another member owns", func(t *testing.T) {
		mine, theirs := ownedBy(owner.o.Ring(), owner.o.ID(), 1)[0], ownedBy(owner.o.Ring(), notOwner.o.ID(), 1)[0]
		req := importRequest{D: []wireImport{
			{K: toWireKey(theirs), S: seq, C: []wireRegionCount{{R: "far", N: 7}}},
			{K: toWireKey(mine), S: seq, C: []wireRegionCount{{R: "far", N: 9}}},
		}}
		var reply importReply
		if st := postSigned(t, from, owner, KindImport, req, &reply); st != http.StatusOK || fmt.Sprint(reply.Refused) != "[0]" {
			t.Fatalf("status %d refused %v, want 200 [0]", st, reply.Refused)
		}
		ctx := context.Background()
		if c, _ := owner.o.store.Load(ctx, theirs, seq); c.Imported.Current != 0 {
			t.Errorf("a refused import raised the receiver's cell to %d", c.Imported.Current)
		}
		if c, _ := owner.o.store.Load(ctx, mine, seq); c.Imported.Current != 9 {
			t.Errorf("an accepted import: %d imported, want 9", c.Imported.Current)
		}
	})
}

// TestNominatedOverManyCalls: a leader that is not the queue's owner takes
// a queue longer than one call carries, and one whose nominations' names
// would take a reply over its byte cap, whole, in calls of their own.
func TestNominatedOverManyCalls(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		bytes int // of each identifier
	}{
		{"over the nominations of a call", 3*maxCallCells + 7, 8},
		{"over the bytes of a reply", maxCallCells, 8 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, others, _ := regionCluster(t)
			ctx := context.Background()
			ns := make([]origin.Nomination, tc.n)
			for i := range ns {
				id := fmt.Sprintf("%d-%s", i, strings.Repeat("x", tc.bytes))
				ns[i] = origin.Nomination{Cell: origin.Cell{Key: origin.Key{Identifier: id, Duration: time.Minute}, Sequence: 1}, Count: int64(i + 1)}
			}
			if err := others[0].o.Nominate(ctx, ns); err != nil {
				t.Fatal(err)
			}
			got, err := others[1].o.Nominated(ctx, 8192)
			if err != nil || len(got) != tc.n {
				t.Fatalf("took %d nominations, %v; want %d", len(got), err, tc.n)
			}
			seen := map[int64]bool{}
			for _, n := range got {
				seen[n.Count] = true
			}
			if len(seen) != tc.n {
				t.Errorf("%d distinct nominations of %d taken", len(seen), tc.n)
			}
			if left, err := others[1].o.Nominated(ctx, 10); err != nil || len(left) != 0 {
				t.Errorf("the queue still holds %d, %v", len(left), err)
			}
		})
	}
}

// TestRegionOwnerOfAnEarlierRelease: while the owner of the region's key
// answers the region's calls 404, as a member of a release before them
// does, every other member leads alone on its own store, as members of that
// release do, and takes its own nominations.
func TestRegionOwnerOfAnEarlierRelease(t *testing.T) {
	owner, others, _ := regionCluster(t)
	h := *owner.rpc.Load()
	var earlier http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, k := range []Kind{KindLead, KindNominate, KindNominated, KindImport} {
			if strings.HasSuffix(r.URL.Path, "/"+string(k)) {
				http.NotFound(w, r)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
	owner.rpc.Store(&earlier)
	ctx := context.Background()
	for _, nd := range others {
		l, err := nd.o.Lead(ctx, origin.LeaseRequest{Holder: nd.o.ID(), TTL: time.Second})
		if err != nil || !l.Held || l.Holder != nd.o.ID() {
			t.Errorf("%s: Lead = %+v, %v; want its own lease", nd.o.ID(), l, err)
		}
		cell := origin.Cell{Key: key("mine-" + nd.o.ID()), Sequence: 1}
		if err := nd.o.Nominate(ctx, []origin.Nomination{{Cell: cell, Count: 3}}); err != nil {
			t.Fatal(err)
		}
		if ns, err := nd.o.Nominated(ctx, 10); err != nil || len(ns) != 1 || ns[0].Cell != cell {
			t.Errorf("%s took %+v, %v; want its own nomination", nd.o.ID(), ns, err)
		}
	}
}
