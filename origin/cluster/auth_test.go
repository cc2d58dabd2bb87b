package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// watchedBody is a request body that records whether it was read.
type watchedBody struct {
	r    io.Reader
	read bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.read = true
	return b.r.Read(p)
}

func (b *watchedBody) Close() error { return nil }

// peerCall is one call to the peer RPC of a node, built field by field.
type peerCall struct {
	method, kind     string
	secret           string
	from, to, inc    string
	ts               int64
	body, signedBody string
	contentLength    int64 // -1: unknown; 0: len(body)
	header           http.Header
	nonceFrom        *http.Header // reuse the auth of this call (a replay)
	omitAuth, bearer bool
	wantStatus       int
	wantReason       RefuseReason // "" for a call taken
	wantBodyUnread   bool
}

// serve sends c to o's handler directly and returns the status, and
// whether the handler read the body.
func (c peerCall) serve(t *testing.T, o *Origin) (status int, read bool, h http.Header) {
	t.Helper()
	signed := c.signedBody
	if signed == "" {
		signed = c.body
	}
	h = http.Header{}
	if c.nonceFrom != nil {
		h = c.nonceFrom.Clone()
	} else if !c.omitAuth {
		newCallAuth(rpcKey(c.secret), Kind(c.kind), c.from, c.to, c.inc, c.ts, []byte(signed)).set(h)
	}
	for k, v := range c.header {
		h[k] = v
	}
	if c.bearer {
		h.Set("Authorization", "Bearer root-key")
	}
	body := &watchedBody{r: strings.NewReader(c.body)}
	req := httptest.NewRequest(c.method, RPCPath+c.kind, nil)
	req.Body, req.Header = body, h
	req.ContentLength = int64(len(c.body))
	if c.contentLength != 0 {
		req.ContentLength = c.contentLength
	}
	rec := httptest.NewRecorder()
	o.serveRPC(rec, req)
	return rec.Code, body.read, h
}

// refusalCase is one call of TestRPCRefusals.
type refusalCase struct {
	name string
	call peerCall
}

// refusalCases are the calls of TestRPCRefusals: good, signed by a for b
// and taken once already with the headers taken, then every way to get one
// wrong.
func refusalCases(a, b *testNode, good peerCall, taken http.Header) []refusalCase {
	with := func(f func(c *peerCall)) peerCall { c := good; f(&c); return c }
	big := strings.Repeat(" ", maxBody+1)
	signedAsLoad := http.Header{}
	newCallAuth(rpcKey(good.secret), KindLoad, a.o.ID(), b.o.ID(), b.o.Incarnation(), good.ts, []byte(good.body)).set(signedAsLoad)
	unauthorized, misdirected := http.StatusUnauthorized, http.StatusMisdirectedRequest
	return []refusalCase{
		{"signed", good},
		{"the same call again", with(func(c *peerCall) { c.nonceFrom, c.wantStatus, c.wantReason = &taken, unauthorized, ReasonReplayed })},
		{"no signature, a root key", with(func(c *peerCall) {
			c.omitAuth, c.bearer, c.wantStatus, c.wantReason, c.wantBodyUnread = true, true, unauthorized, ReasonMalformed, true
		})},
		{"a mangled auth header", with(func(c *peerCall) {
			c.header = http.Header{headerAuth: {fmt.Sprint(good.ts) + ".00000000000000ff"}}
			c.wantStatus, c.wantReason, c.wantBodyUnread = unauthorized, ReasonMalformed, true
		})},
		{"two To headers", with(func(c *peerCall) {
			c.header = http.Header{headerTo: {b.o.ID(), b.o.ID()}}
			c.wantStatus, c.wantReason, c.wantBodyUnread = unauthorized, ReasonMalformed, true
		})},
		{"stale", with(func(c *peerCall) {
			c.ts, c.wantStatus, c.wantReason, c.wantBodyUnread = good.ts-2*maxSkew.Milliseconds(), unauthorized, ReasonStale, true
		})},
		{"signed for another node", with(func(c *peerCall) {
			c.to, c.inc = a.o.ID(), a.o.Incarnation()
			c.wantStatus, c.wantReason, c.wantBodyUnread = misdirected, ReasonMisdirected, true
		})},
		{"signed for an earlier incarnation", with(func(c *peerCall) {
			c.inc, c.wantStatus, c.wantReason, c.wantBodyUnread = newIncarnation(), misdirected, ReasonMisdirected, true
		})},
		{"from a stranger", with(func(c *peerCall) {
			c.from, c.wantStatus, c.wantReason, c.wantBodyUnread = "stranger:7946", unauthorized, ReasonUnknownSender, true
		})},
		{"a body announced over the cap", with(func(c *peerCall) {
			c.body, c.wantStatus, c.wantReason, c.wantBodyUnread = big, http.StatusRequestEntityTooLarge, ReasonTooLarge, true
		})},
		{"a body over the cap, length unknown", with(func(c *peerCall) {
			c.body, c.contentLength, c.wantStatus, c.wantReason = big, -1, http.StatusRequestEntityTooLarge, ReasonTooLarge
		})},
		{"other secret", with(func(c *peerCall) { c.secret, c.wantStatus, c.wantReason = "wrong", unauthorized, ReasonBadMAC })},
		{"other body", with(func(c *peerCall) {
			c.signedBody, c.wantStatus, c.wantReason = strings.Replace(good.body, `"x"`, `"y"`, 1), unauthorized, ReasonBadMAC
		})},
		{"a load sent as a decide", with(func(c *peerCall) {
			c.kind, c.nonceFrom, c.wantStatus, c.wantReason = string(KindDecide), &signedAsLoad, unauthorized, ReasonBadMAC
		})},
		{"an unknown call", with(func(c *peerCall) {
			c.kind, c.wantStatus, c.wantReason, c.wantBodyUnread = "drop-all", http.StatusNotFound, ReasonMalformed, true
		})},
		{"GET", with(func(c *peerCall) {
			c.method, c.wantStatus, c.wantReason, c.wantBodyUnread = http.MethodGet, http.StatusMethodNotAllowed, ReasonMalformed, true
		})},
		{"a bad body, signed", with(func(c *peerCall) {
			c.body, c.wantStatus, c.wantReason = `{"k":{"d":0}}`, http.StatusBadRequest, ReasonBadRequest
		})},
	}
}

// TestRPCRefusals checks every refusal of the peer RPC, its status and
// reason, and that a call whose headers are refused (malformed, stale,
// signed for another node or an earlier incarnation of this one, from a
// stranger, or announcing a body over the cap) is refused before a byte of
// its body is read.
func TestRPCRefusals(t *testing.T) {
	nodes := newTestCluster(t, 2, "right")
	a, b := nodes[0], nodes[1]
	good := peerCall{method: http.MethodPost, kind: string(KindLoad), secret: "right", from: a.o.ID(), to: b.o.ID(),
		inc: b.o.Incarnation(), ts: time.Now().UnixMilli(), body: `{"k":{"w":"ws","n":"ns","i":"x","d":60000},"s":3}`, wantStatus: http.StatusOK}
	status, _, taken := good.serve(t, b.o)
	if status != http.StatusOK {
		t.Fatalf("a signed call: status %d", status)
	}
	for _, tc := range refusalCases(a, b, good, taken) {
		t.Run(tc.name, func(t *testing.T) {
			before := b.obs.refusals(tc.call.wantReason)
			status, read, _ := tc.call.serve(t, b.o)
			if status != tc.call.wantStatus {
				t.Errorf("status %d, want %d", status, tc.call.wantStatus)
			}
			if tc.call.wantReason != "" {
				if got := b.obs.refusals(tc.call.wantReason) - before; got != 1 {
					t.Errorf("%d refusals counted as %q, want 1", got, tc.call.wantReason)
				}
			}
			if tc.call.wantBodyUnread && read {
				t.Error("the body was read before the call was refused")
			}
		})
	}
}

// TestRPCBodyBudget checks that the bodies being read at once are bounded:
// a call that would take the budget over maxInflightBody is refused with
// 503 (the sender tries again) without reading its body, and is taken once
// the budget is free again.
func TestRPCBodyBudget(t *testing.T) {
	nodes := newTestCluster(t, 2, "s")
	a, b := nodes[0], nodes[1]
	body := `{"k":{"w":"ws","n":"ns","i":"x","d":60000},"s":3}`
	call := peerCall{method: http.MethodPost, kind: string(KindLoad), secret: "s", from: a.o.ID(), to: b.o.ID(),
		inc: b.o.Incarnation(), ts: time.Now().UnixMilli(), body: body}
	b.o.inflight.Add(maxInflightBody - int64(len(body)) + 1) // other calls hold all but len(body)-1 bytes
	if status, read, _ := call.serve(t, b.o); status != http.StatusServiceUnavailable || read || b.obs.refusals(ReasonBusy) != 1 {
		t.Fatalf("a call over the budget: status %d, body read %v, busy refusals %d; want 503, unread, 1", status, read, b.obs.refusals(ReasonBusy))
	}
	b.o.inflight.Add(-1)
	call.ts++ // a new call: another nonce anyway
	if status, _, _ := call.serve(t, b.o); status != http.StatusOK {
		t.Fatalf("a call within the budget: status %d", status)
	}
	if got := b.o.inflight.Load(); got != maxInflightBody-int64(len(body)) {
		t.Errorf("budget after the call: %d held, want %d (the call gave its bytes back)", got, maxInflightBody-int64(len(body)))
	}
}

// ownedBy returns n keys that ring gives to owner.
func ownedBy(ring *Ring, owner string, n int) []origin.Key {
	var out []origin.Key
	for i := 0; len(out) < n; i++ {
		if k := key(fmt.Sprintf("o%d", i)); ring.Owner(k) == owner {
			out = append(out, k)
		}
	}
	return out
}

// postSigned sends a signed call of kind with req from node from to node to
// over HTTP and decodes the reply.
func postSigned(t *testing.T, from, to *testNode, kind Kind, req, reply any) int {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest(http.MethodPost, to.srv.URL+RPCPath+string(kind), bytes.NewReader(body))
	newCallAuth(rpcKey("s"), kind, from.o.ID(), to.o.ID(), to.o.Incarnation(), time.Now().UnixMilli(), body).set(r.Header)
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK {
		if err := json.NewDecoder(res.Body).Decode(reply); err != nil {
			t.Fatal(err)
		}
	}
	return res.StatusCode
}

// TestOwnershipOfWrites checks that apply and seed take the cells the
// receiver owns, and those it stands in for when the sender says it routes
// around their owner, and refuse the others without counting them.
func TestOwnershipOfWrites(t *testing.T) {
	nodes := newTestCluster(t, 3, "s")
	a, b, c := nodes[0], nodes[1], nodes[2]
	ring := a.o.Ring()
	seq := time.Now().UnixMilli() / time.Minute.Milliseconds()
	ofB := ownedBy(ring, b.o.ID(), 1)[0]
	var ofCStandInB origin.Key // owned by c, b the runner-up
	for i := 0; ofCStandInB.Duration == 0; i++ {
		k := key(fmt.Sprintf("r%d", i))
		h := KeyHash(k)
		if ring.ownerOf(h) == c.o.ID() && ring.ownerSkipping(h, map[string]bool{c.o.ID(): true}) == b.o.ID() {
			ofCStandInB = k
		}
	}
	ofA := ownedBy(ring, a.o.ID(), 1)[0]
	w := newWriter()
	delta := func(k origin.Key, n int64) wireDelta {
		return toWireDelta(origin.Delta{Cell: origin.Cell{Key: k, Sequence: seq}, Writer: w, Sent: n})
	}
	for _, tc := range []struct {
		name        string
		skip        []string
		wantRefused []int
		wantTotals  []int64
	}{
		{"the owner's view", nil, []int{1, 2}, []int64{5, 0, 0}},
		{"c routed around", []string{c.o.ID()}, []int{2}, []int64{10, 7, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reply applyReply
			req := applyRequest{D: []wireDelta{delta(ofB, 5), delta(ofCStandInB, 7), delta(ofA, 9)}, Skip: tc.skip}
			if tc.skip != nil {
				req.D[0] = delta(ofB, 10) // the writer's whole count: 5 more
			}
			if st := postSigned(t, a, b, KindApply, req, &reply); st != http.StatusOK {
				t.Fatalf("status %d", st)
			}
			if fmt.Sprint(reply.Refused) != fmt.Sprint(tc.wantRefused) || fmt.Sprint(reply.T) != fmt.Sprint(tc.wantTotals) {
				t.Errorf("refused %v totals %v, want %v and %v", reply.Refused, reply.T, tc.wantRefused, tc.wantTotals)
			}
		})
	}
	if got, _ := a.o.localLoad(context.Background(), ofA, seq); got.Current != 0 {
		t.Errorf("a's own cell, refused by b, counted %d at a", got.Current)
	}
	var sr seedReply
	seeds := seedRequest{D: []wireSeed{{K: toWireKey(ofB), S: seq, N: 50}, {K: toWireKey(ofA), S: seq, N: 60}}}
	if st := postSigned(t, a, b, KindSeed, seeds, &sr); st != http.StatusOK || fmt.Sprint(sr.Refused) != "[1]" {
		t.Fatalf("seed: status %d refused %v, want 200 [1]", st, sr.Refused)
	}
	if got, _ := b.o.store.Load(context.Background(), ofA, seq); got.Current != 0 {
		t.Errorf("a refused seed raised b's store to %d", got.Current)
	}
	if got, _ := b.o.store.Load(context.Background(), ofB, seq); got.Current != 50 {
		t.Errorf("an accepted seed: b holds %d, want 50", got.Current)
	}
}

// TestMisroutedWriteIsSentAgain checks the sender's side of a refusal: a
// node whose ring lags (it has not seen a member join) writes to the old
// owner, which refuses the cell; the delta fails with ErrNotOwner wrapped
// in origin.ErrUnavailable, so the limiter sends it again, and once the
// views agree it is counted once, at the new owner.
func TestMisroutedWriteIsSentAgain(t *testing.T) {
	nodes := newTestCluster(t, 3, "s")
	a, b, c := nodes[0], nodes[1], nodes[2]
	seq := time.Now().UnixMilli() / time.Minute.Milliseconds()
	two := membersOf(a, b)
	var stale origin.Key // owned by c with three members, by b with two
	for i := 0; stale.Duration == 0; i++ {
		kk := key(fmt.Sprintf("m%d", i))
		if a.o.Ring().Owner(kk) == c.o.ID() && NewRing(a.o.ID(), b.o.ID()).Owner(kk) == b.o.ID() {
			stale = kk
		}
	}
	a.o.SetPeers(two) // a has not seen c join
	d := add(origin.Cell{Key: stale, Sequence: seq}, 4)
	_, err := a.o.Apply(context.Background(), []origin.Delta{d})
	if !errors.Is(err, origin.ErrUnavailable) {
		t.Fatalf("a write to a node that lost the cell: %v, want ErrUnavailable", err)
	}
	if b.obs.refusals(ReasonBadRequest) != 0 {
		t.Fatal("a refusal of ownership counted as a bad request")
	}
	var cells *origin.CellErrors
	ofB := ownedBy(b.o.Ring(), b.o.ID(), 1)[0] // on both rings: a join takes cells only to the joiner
	mixed := []origin.Delta{add(origin.Cell{Key: ofB, Sequence: seq}, 1), d}
	if _, err := a.o.Apply(context.Background(), mixed); !errors.As(err, &cells) || !errors.Is(cells.Failed[1], ErrNotOwner) || !errors.Is(cells.Failed[1], origin.ErrUnavailable) || cells.Failed[0] != nil {
		t.Fatalf("a batch with one misrouted cell: %v, want delta 1 ErrNotOwner and ErrUnavailable, delta 0 taken", err)
	}
	a.o.SetPeers(membersOf(a, b, c)) // a sees c
	totals, err := a.o.Apply(context.Background(), []origin.Delta{d})
	if err != nil || totals[0].Count != 4 {
		t.Fatalf("the write sent again once the views agree: %v %v, want [4]", totals, err)
	}
	for _, nd := range []*testNode{b, c} {
		want := map[*testNode]int64{b: 0, c: 4}[nd]
		if got, _ := nd.o.store.Load(context.Background(), stale, seq); got.Current != want {
			t.Errorf("%s holds %d, want %d", nd.o.ID(), got.Current, want)
		}
	}
}

// TestRestartedPeer checks a member that restarts under its id: calls
// signed for its earlier incarnation are refused (421) and fail as
// unavailable; once the new incarnation is known, the others reach it and
// seed it with the cells it owned, which it lost with its memory.
func TestRestartedPeer(t *testing.T) {
	nodes := newTestClusterWith(t, 2, Config{Secret: "s", RehomeTicks: make(chan time.Time)})
	a, b := nodes[0], nodes[1]
	seq := time.Now().UnixMilli() / time.Minute.Milliseconds()
	k := ownedBy(a.o.Ring(), b.o.ID(), 1)[0]
	ctx := context.Background()
	if _, err := a.o.Apply(ctx, []origin.Delta{add(origin.Cell{Key: k, Sequence: seq}, 6)}); err != nil {
		t.Fatal(err)
	}
	// b restarts: a new Origin with the same id, behind the same server.
	restarted, err := New(Config{ID: b.o.ID(), Secret: "s", RehomeTicks: make(chan time.Time), Observer: b.obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = restarted.Close() })
	_ = b.o.Close()
	b.o = restarted
	_, h := restarted.Handler()
	b.rpc.Store(&h)
	restarted.SetPeers(membersOf(a))

	before := b.obs.refusals(ReasonMisdirected)
	if _, err := a.o.Load(ctx, k, seq); !errors.Is(err, origin.ErrUnavailable) || !errors.Is(err, ErrPeer) {
		t.Fatalf("a call signed for the earlier incarnation: %v, want ErrPeer and ErrUnavailable", err)
	}
	if b.obs.refusals(ReasonMisdirected) != before+1 {
		t.Fatal("the restarted node did not refuse the call as misdirected")
	}
	a.o.SetPeers(membersOf(a, b)) // the gossip brings the new incarnation
	if n := a.o.Rehome(); n != 1 {
		t.Errorf("Rehome after the restart seeded %d cells, want 1", n)
	}
	if got, err := a.o.Load(ctx, k, seq); err != nil || got.Current != 6 {
		t.Fatalf("the restarted owner: %v %v, want 6 (seeded)", got, err)
	}
}

// TestRefusedSeedIsSentAgain checks that a seed the new owner refuses,
// because its ring lags the sender's, is kept and sent again at the next
// Rehome, to whoever owns the cell then.
func TestRefusedSeedIsSentAgain(t *testing.T) {
	nodes := newTestClusterWith(t, 3, Config{Secret: "s", RehomeTicks: make(chan time.Time)})
	a, b, c := nodes[0], nodes[1], nodes[2]
	seq := time.Now().UnixMilli() / time.Minute.Milliseconds()
	var k origin.Key // owned by c, then by b once c leaves
	for i := 0; k.Duration == 0; i++ {
		kk := key(fmt.Sprintf("s%d", i))
		if a.o.Ring().Owner(kk) == c.o.ID() && NewRing(a.o.ID(), b.o.ID()).Owner(kk) == b.o.ID() {
			k = kk
		}
	}
	ctx := context.Background()
	if _, err := a.o.Apply(ctx, []origin.Delta{add(origin.Cell{Key: k, Sequence: seq}, 8)}); err != nil {
		t.Fatal(err)
	}
	a.o.SetPeers(membersOf(a, b)) // a sees c leave; b does not yet
	if n := a.o.Rehome(); n != 0 {
		t.Fatalf("Rehome seeded %d cells at an owner that does not know it owns them, want 0", n)
	}
	if !a.o.hasPending() {
		t.Fatal("the refused seed was not kept")
	}
	b.o.SetPeers(membersOf(a, b)) // b catches up
	if n := a.o.Rehome(); n != 1 {
		t.Errorf("the second Rehome seeded %d cells, want 1", n)
	}
	if got, _ := b.o.store.Load(ctx, k, seq); got.Current != 8 {
		t.Errorf("the new owner holds %d, want 8", got.Current)
	}
	if a.o.hasPending() {
		t.Error("a seed taken is still pending")
	}
}

// TestDerivedKeys checks the keys derived from the cluster secret: one per
// purpose, 32 bytes, the same on every node, independent of each other and
// not a plain hash of the secret.
func TestDerivedKeys(t *testing.T) {
	const secret = "a-cluster-secret-of-32-bytes-000"
	rpc, gossip := rpcKey(secret), gossipKey(secret)
	plain := sha256.Sum256([]byte(secret))
	switch {
	case len(rpc) != 32 || len(gossip) != 32:
		t.Fatalf("key lengths %d and %d, want 32", len(rpc), len(gossip))
	case bytes.Equal(rpc, gossip):
		t.Fatal("the RPC and gossip keys are the same")
	case bytes.Equal(gossip, plain[:]) || bytes.Equal(rpc, plain[:]):
		t.Fatal("a key is the plain SHA-256 of the secret")
	case !bytes.Equal(rpc, rpcKey(secret)) || !bytes.Equal(gossip, gossipKey(secret)):
		t.Fatal("the derivation is not deterministic")
	case bytes.Equal(gossip, gossipKey(secret+"x")):
		t.Fatal("two secrets give one gossip key")
	}
}
