package sim

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/drive"
)

// roundsHandle records the instants of a node's global rounds.
type roundsHandle struct {
	clock  *vclock
	rounds []int64
}

func (h *roundsHandle) Flush()       {}
func (h *roundsHandle) Round()       {}
func (h *roundsHandle) Cells() int64 { return 0 }
func (h *roundsHandle) SyncGlobal(context.Context) error {
	h.rounds = append(h.rounds, h.clock.milli())
	return nil
}

// TestNodesRoundOnCoursesOfTheirOwn drives 30 s of a deployment of two
// regions of three nodes: after the warm-up's two rounds, in step, every
// node's first round falls within the first round's span (the interval
// over drive.RoundsPerInterval), each next one that span ± 20% after it,
// and the nodes do not round in step.
func TestNodesRoundOnCoursesOfTheirOwn(t *testing.T) {
	const (
		start = int64(1_000_000)
		gi    = int64(1000)
	)
	s := Scenario{Regions: 2, Nodes: 3, GlobalInterval: time.Duration(gi) * time.Millisecond, ReplayInterval: 25 * time.Millisecond}
	r := &run{s: s, start: start, clock: &vclock{}, store: &faultyGlobal{}, nextReplay: start,
		roundGaps: rand.New(rand.NewPCG(1, 2))}
	r.clock.set(start)
	var handles []*roundsHandle
	for range s.Regions * s.Nodes {
		h := &roundsHandle{clock: r.clock}
		handles = append(handles, h)
		r.nodes = append(r.nodes, &node{alive: true, h: h})
	}
	ctx := context.Background()
	r.warmUp(ctx)
	if err := r.advance(ctx, start+30*gi/drive.RoundsPerInterval); err != nil {
		t.Fatal(err)
	}
	firsts := map[int64]bool{}
	for i, h := range handles {
		if len(h.rounds) < 27 || h.rounds[0] != start-2*gi || h.rounds[1] != start-gi {
			t.Fatalf("node %d rounded at %v: want the warm-up's two rounds, then about 30", i, h.rounds)
		}
		first, span := h.rounds[2], gi/drive.RoundsPerInterval
		if first < start || first >= start+span {
			t.Errorf("node %d: first round %d ms into the run, want within the first interval", i, first-start)
		}
		firsts[first] = true
		for j := 3; j < len(h.rounds); j++ {
			if gap := h.rounds[j] - h.rounds[j-1]; gap < span*4/5 || gap > span*6/5+1 { // +1: the span is rounded down
				t.Errorf("node %d: %d ms between rounds %d and %d, want %d ms ± 20%%", i, gap, j-1, j, span)
			}
		}
	}
	if len(firsts) < 2 {
		t.Errorf("every node's first round fell at one instant: %v", firsts)
	}
}
