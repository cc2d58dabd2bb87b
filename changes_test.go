package sluice

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	globalmemory "github.com/sluicehq/sluice/global/memory"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin"
	originmemory "github.com/sluicehq/sluice/origin/memory"
)

// changesRig is a deployment of two or three regions on one memory global
// store, every background round driven by the test: region 0 holds the
// node under test (nodes[0]) and, on a shared origin, maybe a second node;
// the other regions one node each, on an origin or alone.
type changesRig struct {
	now    atomic.Int64
	nodes  []*Limiter
	rounds []drive.Handle
}

func newChangesRig(t *rapid.T) *changesRig {
	r := &changesRig{}
	r.now.Store(1_800_000_000_000)
	clock := func() time.Time { return time.UnixMilli(r.now.Load()) }
	store := globalmemory.New()
	never := make(chan time.Time)
	share := rapid.SampledFrom([]float64{0, 0, 0.3}).Draw(t, "PublishShare")
	regions := rapid.IntRange(2, 3).Draw(t, "regions")
	for i := range regions {
		nodes, shared := 1, rapid.Bool().Draw(t, fmt.Sprintf("region %d on an origin", i))
		if i == 0 && shared && rapid.Bool().Draw(t, "region 0 has two nodes") {
			nodes = 2
		}
		var o origin.Origin
		if shared {
			o = originmemory.New(clock)
		}
		for range nodes {
			cfg := Config{
				Region: fmt.Sprintf("region-%d", i), Origin: o, Clock: clock,
				Global:          &GlobalConfig{Store: store, Interval: time.Second, Timeout: time.Minute},
				OriginTimeout:   time.Minute,
				ReplayTimeout:   time.Minute,
				JanitorInterval: 24 * time.Hour,
			}
			l, err := newLimiter(cfg, drive.Options{ReplayTicks: never, GlobalTicks: never, PublishShare: share})
			if err != nil {
				t.Fatal(err)
			}
			r.nodes, r.rounds = append(r.nodes, l), append(r.rounds, driven{l})
		}
	}
	return r
}

func (r *changesRig) close() {
	for _, l := range r.nodes {
		_ = l.Close()
	}
}

// request draws a request on one of a few counters, at the clock's time or
// in the window before or after it.
func (r *changesRig) request(t *rapid.T, label string) Request {
	d := rapid.SampledFrom([]time.Duration{10 * time.Second, time.Minute}).Draw(t, label+"duration")
	at := r.now.Load() + rapid.SampledFrom([]int64{0, 0, 0, -1, 1}).Draw(t, label+"windows off")*d.Milliseconds()
	return Request{
		Namespace:  "ns",
		Identifier: rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(t, label+"id"),
		Limit:      rapid.SampledFrom([]int64{1, 3, 10, 60}).Draw(t, label+"limit"),
		Duration:   d,
		Cost:       rapid.Int64Range(0, 3).Draw(t, label+"cost"),
		Time:       time.UnixMilli(at),
	}
}

// step runs one action drawn from t on the rig and says what it did.
func (r *changesRig) step(t *rapid.T) string {
	ctx := context.Background()
	n := rapid.IntRange(0, len(r.nodes)-1).Draw(t, "node")
	l := r.nodes[n]
	switch rapid.IntRange(0, 9).Draw(t, "action") {
	case 0, 1, 2:
		q := r.request(t, "")
		if _, err := l.Ratelimit(ctx, q); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("node %d: request %+v", n, q)
	case 3:
		qs := []Request{r.request(t, "batch "), r.request(t, "batch ")}
		var err error
		if rapid.Bool().Draw(t, "report") {
			_, err = l.ReportMany(ctx, qs)
		} else {
			_, err = l.RatelimitMany(ctx, qs)
		}
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("node %d: batch %+v", n, qs)
	case 4:
		ms := rapid.SampledFrom([]int64{1, 100, 333, 1000, 4000, 10_000, 60_000}).Draw(t, "ms")
		r.now.Add(ms)
		return fmt.Sprintf("time +%d ms", ms)
	case 5:
		ms := rapid.SampledFrom([]int64{1, 1000, 10_000}).Draw(t, "back ms")
		r.now.Add(-ms)
		return fmt.Sprintf("time -%d ms", ms)
	case 6:
		r.rounds[n].Round()
		return fmt.Sprintf("node %d: replay round", n)
	case 7:
		_ = r.rounds[n].SyncGlobal(ctx) // a failed round is part of the run
		return fmt.Sprintf("node %d: global round", n)
	case 8:
		var ks []origin.Cell
		for k := range l.cells.m.All() {
			ks = append(ks, k)
		}
		if len(ks) == 0 {
			return "no cell to evict"
		}
		slices.SortFunc(ks, compareCells)
		k := ks[rapid.IntRange(0, len(ks)-1).Draw(t, "evicted")]
		l.cells.delete(k, l.cells.load(l.cells.keyHash(&k.Key), &k))
		return fmt.Sprintf("node %d: %v evicted", n, k)
	default:
		_, evicted := l.sweep(r.now.Load())
		return fmt.Sprintf("node %d: %d cells swept", n, evicted)
	}
}

// compareCells orders the cells of one namespace and workspace.
func compareCells(a, b origin.Cell) int {
	return cmp.Or(strings.Compare(a.Identifier, b.Identifier), cmp.Compare(a.Duration, b.Duration), cmp.Compare(a.Sequence, b.Sequence))
}

// ruleOverAll returns the nomination of every cell l holds that the
// publication rule publishes at now: what a pass over all of them finds.
func ruleOverAll(l *Limiter, now int64) map[origin.Cell]origin.Nomination {
	regions := int64(max(l.global.regions, 2))
	want := map[origin.Cell]origin.Nomination{}
	for k, c := range l.cells.m.All() {
		if nm, ok := l.nominee(k, c, regions, now); ok {
			want[k] = nm
		}
	}
	return want
}

// TestPublishableLooksAtChangedCells: at any point of a random run of
// requests, batches, reports, time steps (some backwards), replay and
// global rounds, evictions and sweeps over several regions, the cells the
// publication rule nominates looking only at the changed ones are those a
// pass over every cell nominates, with the same counts and limits. A
// nomination checked here counts as a failed hand-over: its cells are
// looked at again.
func TestPublishableLooksAtChangedCells(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := newChangesRig(t)
		defer r.close()
		l := r.nodes[0]
		var did []string
		for range rapid.IntRange(1, 300).Draw(t, "steps") {
			did = append(did, r.step(t))
			if !rapid.Bool().Draw(t, "check") {
				continue
			}
			now := r.now.Load()
			l.globalMu.Lock()
			want := ruleOverAll(l, now)
			ns, cells := l.publishable(now)
			for _, c := range cells {
				l.changed(c)
			}
			l.globalMu.Unlock()
			got := map[origin.Cell]origin.Nomination{}
			for _, nm := range ns {
				if _, twice := got[nm.Cell]; twice {
					t.Fatalf("after %v: %v nominated twice", did, nm.Cell)
				}
				got[nm.Cell] = nm
			}
			if !maps.Equal(got, want) {
				t.Fatalf("after %v: nominated %v, a pass over every cell %v", did, got, want)
			}
		}
	})
}

// TestPublishedPruned: the cells of published expired at now are
// forgotten when the rule next runs, at once after the end of the window
// after theirs and not before.
func TestPublishedPruned(t *testing.T) {
	cell := func(id string, seq int64) origin.Cell {
		return origin.Cell{Key: origin.Key{Namespace: "ns", Identifier: id, Duration: time.Second}, Sequence: seq}
	}
	tests := []struct {
		name string
		now  int64
		kept []string
	}{
		{"before any expiry", 11_999, []string{"10", "11"}},
		{"at the end of the window after 10", 12_000, []string{"11"}},
		{"past both", 13_000, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := globalState{published: map[origin.Cell]stored{}}
			g.setPublished(cell("10", 10), stored{count: 1})
			g.setPublished(cell("11", 11), stored{count: 1})
			g.prunePublished(tt.now)
			var kept []string
			for k := range g.published {
				kept = append(kept, k.Identifier)
			}
			slices.Sort(kept)
			if !slices.Equal(kept, tt.kept) {
				t.Fatalf("kept %v, want %v", kept, tt.kept)
			}
		})
	}
}

// TestChangedCells: a cell is on the list once however often it is
// marked, flagged until the caller clears it; once cleared, a mark puts it
// on the next list.
func TestChangedCells(t *testing.T) {
	tests := []struct {
		name  string
		marks []int // indexes of the cells marked, in order
		want  []int // the cells taken, in order
	}{
		{"none", nil, nil},
		{"one", []int{0}, []int{0}},
		{"marked twice", []int{1, 0, 1, 1}, []int{1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s changedCells
			cells := make([]cell, 2)
			for _, i := range tt.marks {
				s.mark(&cells[i])
			}
			taken := s.take(nil)
			var got []int
			for _, c := range taken {
				if c.flags.Load()&flagChanged == 0 {
					t.Fatal("a taken cell is no longer flagged")
				}
				got = append(got, slices.Index([]*cell{&cells[0], &cells[1]}, c))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("took %v, want %v", got, tt.want)
			}
			for _, c := range taken {
				c.clearFlag(flagChanged)
				s.mark(c)
			}
			if again := s.take(taken); len(again) != len(tt.want) {
				t.Fatalf("took %d cells marked again after their flags cleared, want %d", len(again), len(tt.want))
			}
		})
	}
}
