package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// largeDelta is a delta with the given names and the largest numbers.
func largeDelta(w, n, i string) wireDelta {
	k := origin.Key{Workspace: w, Namespace: n, Identifier: i, Duration: 30 * 24 * time.Hour}
	return toWireDelta(origin.Delta{Cell: origin.Cell{Key: k, Sequence: math.MaxInt64}, Writer: math.MaxUint64, Sent: math.MaxInt64})
}

// TestMaxBodyFitsAReplayBatch checks the figures behind maxBody: a replay
// batch (maxCallCells deltas) of the largest HTTP API keys fits in one
// call, and so does the largest single seed (a MaxKeyBytes key whose every
// byte JSON escapes to 6, with maxSeedShares shares).
func TestMaxBodyFitsAReplayBatch(t *testing.T) {
	batch := make([]wireDelta, maxCallCells)
	for i := range batch {
		batch[i] = largeDelta(strings.Repeat("w", 255), strings.Repeat("n", 512), strings.Repeat("i", 512))
	}
	bodies, _, err := packAll(batch, []string{"a-member-skipped:7946"})
	if err != nil || len(bodies) != 1 {
		t.Fatalf("a replay batch of the largest API keys: %d calls (%v), want 1", len(bodies), err)
	}
	t.Logf("a replay batch of %d deltas of the largest HTTP API keys: %d bytes (cap %d)", maxCallCells, len(bodies[0]), maxBody)

	sd := seed{Cell: origin.Cell{Key: origin.Key{Workspace: strings.Repeat("\x01", MaxKeyBytes), Duration: time.Hour}, Sequence: math.MaxInt64},
		Total: math.MaxInt64, Imported: math.MaxInt64, Shares: map[origin.Writer]int64{}}
	for i := range maxSeedShares {
		sd.Shares[origin.Writer(math.MaxUint64-uint64(i))] = math.MaxInt64
	}
	wire := toWireSeeds(sd)
	bodies, _, err = packAll(wire, nil)
	if err != nil || len(bodies) != 1 || len(wire) != 1 {
		t.Fatalf("the largest seed: %d wire seeds in %d calls (%v), want 1 in 1", len(wire), len(bodies), err)
	}
	t.Logf("the largest single seed: %d bytes", len(bodies[0]))
}

// TestPackSplitsLargeBatches checks that a batch over the caps goes in
// several calls, each within maxCallCells entries and maxBody bytes, that
// carry every entry once and in order.
func TestPackSplitsLargeBatches(t *testing.T) {
	rlsID := strings.Repeat("e", 8256) // the longest Envoy RLS identifier
	for _, tc := range []struct {
		name  string
		n     int
		ident string
	}{
		{"more deltas than a call takes", 600, "user"},
		{"more bytes than a call takes", 100, rlsID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			batch := make([]wireDelta, tc.n)
			for i := range batch {
				batch[i] = largeDelta("ws", "ns", tc.ident)
				batch[i].S = int64(i)
			}
			bodies, firsts, err := packAll(batch, []string{"x"})
			if err != nil || len(bodies) < 2 || len(firsts) != len(bodies) {
				t.Fatalf("%d calls, firsts %v (%v): want several", len(bodies), firsts, err)
			}
			next := 0
			for c, body := range bodies {
				var req applyRequest
				if err := json.Unmarshal(body, &req); err != nil {
					t.Fatalf("call %d: %v", c, err)
				}
				if len(body) > maxBody || len(req.D) > maxCallCells || firsts[c] != next || len(req.Skip) != 1 {
					t.Fatalf("call %d: %d bytes, %d deltas, first %d (want %d), skip %v", c, len(body), len(req.D), firsts[c], next, req.Skip)
				}
				for _, d := range req.D {
					if d.S != int64(next) {
						t.Fatalf("call %d: delta %d where %d was due", c, d.S, next)
					}
					next++
				}
			}
			if next != tc.n {
				t.Fatalf("%d deltas carried, want %d", next, tc.n)
			}
		})
	}
}

// TestSeedSharesSplit checks that a seed with more than maxSeedShares
// writers goes as several wire seeds of the same cell that carry every
// share once.
func TestSeedSharesSplit(t *testing.T) {
	sd := seed{Cell: origin.Cell{Key: key("many"), Sequence: 3}, Total: 500, Shares: map[origin.Writer]int64{}}
	for i := range 150 {
		sd.Shares[origin.Writer(i+1)] = int64(i + 1)
	}
	wire := toWireSeeds(sd)
	got := map[origin.Writer]int64{}
	for _, w := range wire {
		if len(w.Shares) > maxSeedShares || w.N != 500 || w.S != 3 {
			t.Fatalf("a wire seed of %d shares, total %d, seq %d", len(w.Shares), w.N, w.S)
		}
		for w2, n := range w.seed().Shares {
			got[w2] = n
		}
	}
	if len(wire) != 3 || len(got) != 150 {
		t.Fatalf("%d wire seeds carrying %d shares, want 3 carrying 150", len(wire), len(got))
	}
}

// TestKeyTooLong checks that a key over MaxKeyBytes is refused by every
// call, owned here or not, and that its delta is refused alone and not as
// an outage (the limiter drops it after a few tries rather than forever).
func TestKeyTooLong(t *testing.T) {
	nodes := newTestCluster(t, 2, "s")
	o := nodes[0].o
	ctx := context.Background()
	long := origin.Key{Workspace: "ws", Namespace: "ns", Identifier: strings.Repeat("x", MaxKeyBytes), Duration: time.Minute}
	if _, err := o.Load(ctx, long, 1); !errors.Is(err, ErrKeyTooLong) {
		t.Errorf("Load: %v, want ErrKeyTooLong", err)
	}
	if _, err := o.Decide(ctx, origin.Check{Key: long, Seq: 1, Asks: []origin.Ask{{Limit: 1, Cost: 1}}}); !errors.Is(err, ErrKeyTooLong) {
		t.Errorf("Decide: %v, want ErrKeyTooLong", err)
	}
	_, err := o.Apply(ctx, []origin.Delta{add(origin.Cell{Key: key("short"), Sequence: 1}, 1), add(origin.Cell{Key: long, Sequence: 1}, 1)})
	var cells *origin.CellErrors
	if !errors.As(err, &cells) || !errors.Is(cells.Failed[1], ErrKeyTooLong) || errors.Is(cells.Failed[1], origin.ErrUnavailable) || cells.Failed[0] != nil {
		t.Errorf("Apply: %v, want delta 1 alone ErrKeyTooLong, not ErrUnavailable", err)
	}
}

// TestReceiverCapsBatches checks that an authenticated call over the
// per-call caps is a bad request: more deltas or seeds than maxCallCells,
// more members skipped than maxSkip, a seed with more than maxSeedShares
// shares, a key over MaxKeyBytes.
func TestReceiverCapsBatches(t *testing.T) {
	nodes := newTestCluster(t, 2, "s")
	a, b := nodes[0], nodes[1]
	small := largeDelta("ws", "ns", "x")
	many := make([]wireDelta, maxCallCells+1)
	for i := range many {
		many[i] = small
	}
	manyShares := wireSeed{K: small.K, S: 1, N: 1}
	for i := range maxSeedShares + 1 {
		manyShares.Shares = append(manyShares.Shares, wireShare{W: origin.Writer(i), N: 1})
	}
	for _, tc := range []struct {
		name string
		kind Kind
		req  any
	}{
		{"too many deltas", KindApply, applyRequest{D: many}},
		{"too many members skipped", KindApply, applyRequest{D: many[:1], Skip: make([]string, maxSkip+1)}},
		{"a key too long", KindApply, applyRequest{D: []wireDelta{largeDelta("ws", "ns", strings.Repeat("x", MaxKeyBytes))}}},
		{"too many shares", KindSeed, seedRequest{D: []wireSeed{manyShares}}},
		{"a load of a key too long", KindLoad, loadRequest{K: largeDelta("ws", "ns", strings.Repeat("x", MaxKeyBytes)).K, S: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st := postSigned(t, a, b, tc.kind, tc.req, &struct{}{}); st != http.StatusBadRequest {
				t.Errorf("status %d, want 400", st)
			}
		})
	}
}
