package cluster

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// holdCalls makes nd's RPC handler hold every call until release is
// closed, signalling each arrival on arrived, and answer the calls whose
// kind is refuse with 404, as a node of a version without it would.
func holdCalls(nd *testNode, refuse Kind) (arrived chan Kind, release chan struct{}) {
	arrived, release = make(chan Kind, 16), make(chan struct{})
	inner := *nd.rpc.Load()
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := Kind(strings.TrimPrefix(r.URL.Path, RPCPath))
		arrived <- kind
		<-release
		if kind == refuse {
			http.Error(w, "unknown call", http.StatusNotFound)
			return
		}
		inner.ServeHTTP(w, r)
	})
	nd.rpc.Store(&h)
	return arrived, release
}

// queued waits until n decisions wait in q.
func queued(t *testing.T, q *decideQueue, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		got := len(q.waiting)
		q.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d decisions wait, want %d", got, n)
		}
	}
}

// TestDecisionsShareACall checks that the decisions of several counters a
// peer owns, made while a call to it is on its way, go in one decides call
// when it returns, each with the verdict a call of its own would give; and
// that a peer answering decides calls with 404 (an older version) gets them
// one by one from then on.
func TestDecisionsShareACall(t *testing.T) {
	tests := []struct {
		name             string
		refuse           Kind
		wantKinds        []Kind // the calls the owner sees, in order
		wantNoDecides    bool
		wantDecidesCalls int // as the sender's observer counts them, any outcome
	}{
		{"one call for the waiting decisions", "", []Kind{KindDecide, KindDecides}, false, 1},
		{"an owner without decides calls", KindDecides, []Kind{KindDecide, KindDecides, KindDecide, KindDecide, KindDecide}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := newTestCluster(t, 2, "s")
			a, b := nodes[0], nodes[1]
			keys := ownedBy(a.o.Ring(), b.o.ID(), 4)
			arrived, release := holdCalls(b, tt.refuse)
			results := make(chan error, len(keys))
			decide := func(k origin.Key) {
				v, err := a.o.Decide(context.Background(), origin.Check{Key: k, Seq: 5, Writer: 1, Asks: []origin.Ask{{Limit: 10, Cost: 3}}})
				if err == nil && (len(v.Admitted) != 1 || !v.Admitted[0] || v.Counts.Current != 3 || v.Share != 3) {
					err = errors.New("wrong verdict")
				}
				results <- err
			}
			go decide(keys[0])
			if kind := <-arrived; kind != KindDecide {
				t.Fatalf("first call %q, want %q", kind, KindDecide)
			}
			p := a.o.view.Load().peers[b.o.ID()]
			for _, k := range keys[1:] {
				go decide(k)
			}
			queued(t, &p.decides, len(keys)-1)
			close(release)
			for range keys {
				if err := <-results; err != nil {
					t.Error(err)
				}
			}
			var got []Kind
			for len(arrived) > 0 {
				got = append(got, <-arrived)
			}
			if got = append([]Kind{KindDecide}, got...); strings.Join(kinds(got), ",") != strings.Join(kinds(tt.wantKinds), ",") {
				t.Errorf("the owner saw %v, want %v", got, tt.wantKinds)
			}
			if p.noDecides.Load() != tt.wantNoDecides {
				t.Errorf("noDecides %v, want %v", p.noDecides.Load(), tt.wantNoDecides)
			}
			if n := a.obs.count(KindDecides, OutcomeOK) + a.obs.count(KindDecides, OutcomeError); n != tt.wantDecidesCalls {
				t.Errorf("%d decides calls counted, want %d", n, tt.wantDecidesCalls)
			}
		})
	}
}

func kinds(ks []Kind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

// TestWaitingDecisionGivesUp checks that a decision whose caller gives up
// while it waits for a call on its way leaves the queue unsent, and that
// the others are decided.
func TestWaitingDecisionGivesUp(t *testing.T) {
	nodes := newTestCluster(t, 2, "s")
	a, b := nodes[0], nodes[1]
	keys := ownedBy(a.o.Ring(), b.o.ID(), 3)
	arrived, release := holdCalls(b, "")
	check := func(k origin.Key) origin.Check {
		return origin.Check{Key: k, Seq: 5, Writer: 1, Asks: []origin.Ask{{Limit: 10, Cost: 1}}}
	}
	done := make(chan error, 3)
	go func() { _, err := a.o.Decide(context.Background(), check(keys[0])); done <- err }()
	<-arrived
	p := a.o.view.Load().peers[b.o.ID()]
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, err := a.o.Decide(ctx, check(keys[1])); done <- err }()
	queued(t, &p.decides, 1)
	go func() { _, err := a.o.Decide(context.Background(), check(keys[2])); done <- err }()
	queued(t, &p.decides, 2)
	cancel()
	queued(t, &p.decides, 1)
	close(release)
	var canceled, ok int
	for range 3 {
		switch err := <-done; {
		case err == nil:
			ok++
		case errors.Is(err, context.Canceled):
			canceled++
		default:
			t.Error(err)
		}
	}
	if ok != 2 || canceled != 1 {
		t.Errorf("%d decided, %d gave up; want 2 and 1", ok, canceled)
	}
	if c, err := b.o.Load(context.Background(), keys[1], 5); err != nil || c.Current != 0 {
		t.Errorf("the decision that gave up reached the owner: %+v, %v", c, err)
	}
}

// TestDecidesCallRefusals checks the bounds of a decides call: no
// decision, more than maxDecides, or an invalid key is refused with 400.
func TestDecidesCallRefusals(t *testing.T) {
	nodes := newTestCluster(t, 2, "s")
	a, b := nodes[0], nodes[1]
	good := toDecideRequest(origin.Check{Key: key("x"), Seq: 5, Writer: 1, Asks: []origin.Ask{{Limit: 1, Cost: 1}}})
	bad := good
	bad.K.D = 0
	tests := []struct {
		name string
		req  decidesRequest
		want int
	}{
		{"no decision", decidesRequest{}, http.StatusBadRequest},
		{"too many", decidesRequest{C: make([]decideRequest, maxDecides+1)}, http.StatusBadRequest},
		{"invalid key", decidesRequest{C: []decideRequest{good, bad}}, http.StatusBadRequest},
		{"two decisions", decidesRequest{C: []decideRequest{good, good}}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reply decidesReply
			if got := postSigned(t, a, b, KindDecides, tt.req, &reply); got != tt.want {
				t.Fatalf("status %d, want %d", got, tt.want)
			}
			if tt.want == http.StatusOK && (len(reply.R) != 2 || !reply.R[0].A[0] || reply.R[1].A[0] || reply.E[0] != "" || reply.E[1] != "") {
				t.Errorf("reply %+v: want the first admitted and the second denied", reply)
			}
		})
	}
}
