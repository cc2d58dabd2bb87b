package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/global"
	globalmemory "github.com/sluicehq/sluice/global/memory"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// virtualClock is a clock that tests move by hand.
type virtualClock struct{ ms atomic.Int64 }

func (c *virtualClock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *virtualClock) set(ms int64)            { c.ms.Store(ms) }
func (c *virtualClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// drivenNode is a limiter whose background rounds the test runs.
type drivenNode struct {
	*sluice.Limiter
	drive.Handle
}

// newRegions returns one single-node limiter per region, all sharing store
// and clock, with the global layer of g and the global loop driven by the
// test through SyncGlobal.
func newRegions(t testing.TB, n int, store global.Store, clock *virtualClock, g sluice.GlobalConfig, o drive.Options) []drivenNode {
	t.Helper()
	regions := make([]drivenNode, n)
	for i := range regions {
		g := g
		g.Store = store
		o.GlobalTicks = make(chan time.Time) // never fires: the test syncs
		l, h := newDriven(t, sluice.Config{Region: fmt.Sprintf("region-%d", i), Global: &g, Clock: clock.now}, o)
		regions[i] = drivenNode{l, h}
	}
	return regions
}

// syncAll runs two global rounds in every region, in order: the second
// lets a leader take what its region's other nodes nominated after its
// first, and the regions after it pull what it wrote.
func syncAll(t *testing.T, regions []drivenNode) {
	t.Helper()
	for range 2 { // a leader takes what its region's other nodes nominated after its round at its next
		for _, r := range regions {
			if err := r.SyncGlobal(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestBurstInOneRegion spends a counter's whole limit in region 0: after one
// round the other regions deny it, and after the rollover they still deny
// what the previous window's weight forbids. Each mechanism alone must do
// it, and both together.
func TestBurstInOneRegion(t *testing.T) {
	const limit, d = 100, 10 * time.Minute
	modes := []struct {
		name string
		cfg  sluice.GlobalConfig
	}{
		{"global counters only", sluice.GlobalConfig{DisableDenials: true}},
		{"denial propagation only", sluice.GlobalConfig{DisableCounters: true}},
		{"both", sluice.GlobalConfig{}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			clock := &virtualClock{}
			start := int64(1000) * d.Milliseconds() // a cell boundary
			clock.set(start)
			regions := newRegions(t, 3, globalmemory.New(), clock, mode.cfg, drive.Options{})
			ctx := context.Background()
			syncAll(t, regions) // every region announces itself
			r := req("burst", limit, 1, d, time.Time{})
			for i := range limit {
				if res, _ := regions[0].Ratelimit(ctx, r); !res.Success {
					t.Fatalf("request %d denied in region 0", i)
				}
			}
			if res, _ := regions[0].Ratelimit(ctx, r); res.Success { // the first denial
				t.Fatal("request over the limit admitted in region 0")
			}
			for _, other := range regions[1:] { // before any round: regional only
				if res, _ := other.Ratelimit(ctx, req("burst", limit, 0, d, time.Time{})); res.Current != 0 {
					t.Fatalf("another region sees %d before any round", res.Current)
				}
			}
			clock.advance(5 * time.Second)
			syncAll(t, regions) // region 0 writes; the others read afterwards
			syncAll(t, regions)
			for i, other := range regions[1:] {
				if res, _ := other.Ratelimit(ctx, r); res.Success {
					t.Fatalf("region %d admitted after the burst was propagated", i+1)
				}
			}
			// 10% into the next window the previous one weighs 90.
			clock.set(start + d.Milliseconds() + d.Milliseconds()/10)
			for i, other := range regions[1:] {
				if res, _ := other.Ratelimit(ctx, req("burst", limit, 11, d, time.Time{})); res.Success {
					t.Fatalf("region %d admitted 11 units while the previous window weighs 90", i+1)
				}
				if res, _ := other.Ratelimit(ctx, req("burst", limit, 10, d, time.Time{})); !res.Success {
					t.Fatalf("region %d denied the 10 units the previous window leaves (current %d)", i+1, res.Current)
				}
			}
		})
	}
}

// spreadResult is what one spread-evenly run admitted.
type spreadResult struct {
	worst float64 // highest admitted/limit over the full fixed windows
	rows  int     // rows published
}

// runSpread sends traffic at load × limit per window, spread evenly at
// random over the regions, for windows windows of intervals rounds each, and
// returns the worst window. Every region syncs once per interval.
func runSpread(t *testing.T, regions int, load float64, g sluice.GlobalConfig, o drive.Options, withGlobal bool) spreadResult {
	t.Helper()
	const limit, intervals, windows = 1000, 60, 5
	const d = time.Minute
	interval := d / intervals
	clock := &virtualClock{}
	start := int64(100_000) * d.Milliseconds()
	clock.set(start)
	store := &countingStore{Store: globalmemory.New()}
	var limiters []drivenNode
	if withGlobal {
		limiters = newRegions(t, regions, store, clock, g, o)
	} else {
		for range regions {
			limiters = append(limiters, drivenNode{Limiter: newLimiter(t, sluice.Config{Clock: clock.now})})
		}
	}
	rng := rand.New(rand.NewPCG(uint64(regions), uint64(load*100)))
	ctx := context.Background()
	perInterval := int(load * limit / intervals)
	admitted := make([]int, windows)
	for tick := range windows * intervals {
		for i := range perInterval {
			at := clock.ms.Load() + int64(i)*interval.Milliseconds()/int64(perInterval)
			r := req("spread", limit, 1, d, time.UnixMilli(at))
			if res, _ := limiters[rng.IntN(regions)].Ratelimit(ctx, r); res.Success {
				admitted[tick/intervals]++
			}
		}
		clock.advance(interval)
		if withGlobal {
			syncAll(t, limiters)
		}
	}
	var res spreadResult
	for _, n := range admitted {
		res.worst = max(res.worst, float64(n)/limit)
	}
	res.rows = int(store.published.Load())
	t.Logf("%d regions at %.1f× the limit: admitted per window %v (limit %d), %d rows published", regions, load, admitted, limit, res.rows)
	return res
}

// countingStore counts the rows published through it.
type countingStore struct {
	global.Store
	published atomic.Int64
}

func (s *countingStore) Publish(ctx context.Context, region string, counts []global.Count, now int64) error {
	s.published.Add(int64(len(counts)))
	return s.Store.Publish(ctx, region, counts, now)
}

// TestSpreadEvenly checks the publication rule against traffic spread evenly
// over the regions, the shape that denial propagation alone never sees: the
// total admitted stays within 10% of the limit in every window, where no
// global layer, or a fixed 20% publication floor, lets far more through.
func TestSpreadEvenly(t *testing.T) {
	tests := []struct {
		name       string
		regions    int
		load       float64
		offWorst   float64 // at least this much without the global layer
		fixedWorst float64 // at least this much with the fixed 20% floor
	}{
		{"3 regions sharing 2x the limit", 3, 2, 1.9, 0},
		{"8 regions sharing 1.5x the limit (the free zone)", 8, 1.5, 1.4, 1.4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			countsOnly := sluice.GlobalConfig{DisableDenials: true}
			off := runSpread(t, tc.regions, tc.load, sluice.GlobalConfig{}, drive.Options{}, false)
			fixed := runSpread(t, tc.regions, tc.load, countsOnly, drive.Options{PublishShare: 0.2}, true)
			rule := runSpread(t, tc.regions, tc.load, countsOnly, drive.Options{}, true)
			t.Logf("worst window / limit: global layer off %.3f, fixed 20%% floor %.3f, adaptive rule %.3f", off.worst, fixed.worst, rule.worst)
			if off.worst < tc.offWorst {
				t.Errorf("without the global layer the worst window is %.3f× the limit; the scenario should pass at least %.2f×", off.worst, tc.offWorst)
			}
			if fixed.worst < tc.fixedWorst {
				t.Errorf("with a fixed 20%% floor the worst window is %.3f×; the free zone should let at least %.2f× through", fixed.worst, tc.fixedWorst)
			}
			if rule.worst > 1.10 {
				t.Errorf("with the adaptive rule the worst window is %.3f× the limit, want ≤ 1.10", rule.worst)
			}
		})
	}
}

// TestNoDoubleCounting checks that a region's imported count holds only the
// other regions' traffic, that what a region publishes is its own count
// only, and that the speculative increments of batches that roll back never
// reach the global store, even while rounds run concurrently.
func TestNoDoubleCounting(t *testing.T) {
	const limit, d = 1000, 10 * time.Minute
	clock := &virtualClock{}
	clock.set(7000 * d.Milliseconds())
	store := &recordingStore{Store: globalmemory.New(), max: map[string]int64{}}
	regions := newRegions(t, 3, store, clock, sluice.GlobalConfig{DisableDenials: true}, drive.Options{})
	ctx := context.Background()
	spent := []int64{300, 200, 100}
	for i, n := range spent {
		if res, _ := regions[i].Ratelimit(ctx, req("shared", limit, n, d, time.Time{})); !res.Success {
			t.Fatalf("region %d denied %d units", i, n)
		}
	}
	for range 4 { // announce, learn R, publish, import
		syncAll(t, regions)
	}
	for i, r := range regions {
		res, _ := r.Ratelimit(ctx, req("shared", limit, 0, d, time.Time{}))
		if res.Current != 600 {
			t.Errorf("region %d sees %d, want 600 (its own %d plus the others')", i, res.Current, spent[i])
		}
		if got := store.maxOf(fmt.Sprintf("region-%d", i), "shared"); got != spent[i] {
			t.Errorf("region %d published %d, want its own count %d", i, got, spent[i])
		}
	}

	// Batches that always roll back, while rounds run.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = regions[0].SyncGlobal(ctx)
			}
		}
	})
	for range 2000 {
		_, _ = regions[0].RatelimitMany(ctx, []sluice.Request{
			req("speculative", limit, 900, d, time.Time{}),
			req("closed", 0, 1, d, time.Time{}),
		})
	}
	close(stop)
	wg.Wait()
	if got := store.maxOf("region-0", "speculative"); got != 0 {
		t.Fatalf("a rolled-back batch's increment reached the global store: %d", got)
	}
}

// recordingStore remembers the highest count published per region and
// identifier, and per region, identifier and cell sequence.
type recordingStore struct {
	global.Store
	mu  sync.Mutex
	max map[string]int64
}

func (s *recordingStore) Publish(ctx context.Context, region string, counts []global.Count, now int64) error {
	s.mu.Lock()
	for _, c := range counts {
		for _, k := range []string{region + "/" + c.Cell.Identifier, fmt.Sprintf("%s/%s/%d", region, c.Cell.Identifier, c.Cell.Sequence)} {
			s.max[k] = max(s.max[k], c.Count)
		}
	}
	s.mu.Unlock()
	return s.Store.Publish(ctx, region, counts, now)
}

// maxOf is the highest count region published of identifier id.
func (s *recordingStore) maxOf(region, id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max[region+"/"+id]
}

// cellOf is the highest count region published of identifier id's cell seq.
func (s *recordingStore) cellOf(region, id string, seq int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max[fmt.Sprintf("%s/%s/%d", region, id, seq)]
}

// TestDenialCarriesUsage propagates a denial that came from a large request
// on a counter with room left: the other regions deny what the originator
// denied, not the whole window.
func TestDenialCarriesUsage(t *testing.T) {
	const limit, d = 100, 10 * time.Minute
	clock := &virtualClock{}
	clock.set(3000 * d.Milliseconds())
	regions := newRegions(t, 2, globalmemory.New(), clock, sluice.GlobalConfig{DisableCounters: true}, drive.Options{})
	ctx := context.Background()
	if res, _ := regions[0].Ratelimit(ctx, req("big", limit, 80, d, time.Time{})); !res.Success {
		t.Fatal("80 of 100 denied")
	}
	if res, _ := regions[0].Ratelimit(ctx, req("big", limit, 30, d, time.Time{})); res.Success {
		t.Fatal("80 + 30 of 100 admitted")
	}
	syncAll(t, regions)
	syncAll(t, regions)
	if res, _ := regions[1].Ratelimit(ctx, req("big", limit, 30, d, time.Time{})); res.Success {
		t.Fatal("the other region admitted the 30 units the originator denied")
	}
	if res, _ := regions[1].Ratelimit(ctx, req("big", limit, 20, d, time.Time{})); !res.Success {
		t.Fatalf("the other region denied the 20 units left (current %d)", res.Current)
	}
}

// TestOwnRegionDenialsNotImported runs two nodes of region "a" on one
// regional origin and a node of region "b", all on one global store. Node a1
// admits 60 of 100 and denies a request of 50: its denial row must bring
// region b to 60, and must not reach a1's sibling a2, which sees those 60
// through the origin already. Imported as well, they would count twice: a2
// would see 120 and deny the 40 units left for the rest of the window.
//
// With the global counters on, a pull that brings the region's own count
// first hides the double count; a denial row ahead of the count (denials
// are written every DenialFlush, counts every GlobalInterval) does not,
// which the second mode reproduces by failing region a's publishes.
func TestOwnRegionDenialsNotImported(t *testing.T) {
	stores := []struct {
		name    string
		connect func(t *testing.T) func() global.Store // a store per call, on the same rows
	}{
		{"memory", func(*testing.T) func() global.Store {
			s := globalmemory.New()
			return func() global.Store { return s }
		}},
		{"memory, returning own rows", func(*testing.T) func() global.Store { // the limiter's filter alone
			s := everyDenial{globalmemory.New()}
			return func() global.Store { return s }
		}},
		{"mariadb", func(t *testing.T) func() global.Store {
			dsn := testenv.MySQLDSN(t)
			prefix := globalPrefix(t, dsn)
			return func() global.Store { return openGlobal(t, dsn, prefix) }
		}},
	}
	modes := []struct {
		name string
		cfg  sluice.GlobalConfig
		hold bool // region a's publishes fail, so the row arrives alone
	}{
		{"denial propagation only", sluice.GlobalConfig{DisableCounters: true}, false},
		{"both, the row ahead of the count", sluice.GlobalConfig{}, true},
	}
	for _, st := range stores {
		for _, mode := range modes {
			t.Run(st.name+"/"+mode.name, func(t *testing.T) {
				testOwnRegionDenials(t, st.connect(t), mode.cfg, mode.hold)
			})
		}
	}
}

func testOwnRegionDenials(t *testing.T, connect func() global.Store, g sluice.GlobalConfig, hold bool) {
	const limit, d = 100, 10 * time.Minute
	clock := &virtualClock{}
	clock.set(4000*d.Milliseconds() + 1000)
	shared := memory.New(clock.now)
	node := func(region string, store global.Store, o origin.Origin) drivenNode {
		g := g
		g.Store = store
		l, h := newDriven(t, sluice.Config{Region: region, Global: &g, Origin: o, Clock: clock.now}, drive.Options{
			GlobalTicks: make(chan time.Time), // never fires: the test syncs
			ReplayTicks: make(chan time.Time), // likewise: the test flushes
		})
		return drivenNode{l, h}
	}
	held := &heldPublishes{Store: connect()}
	held.on.Store(hold)
	a1 := node("a", held, shared)
	a2 := node("a", connect(), shared)
	b := node("b", connect(), nil)
	ctx := context.Background()
	round := func() {
		t.Helper()
		for i, n := range []drivenNode{a1, a2, b} {
			if err := n.SyncGlobal(ctx); err != nil && (i != 0 || !hold || !errors.Is(err, global.ErrUnavailable)) {
				t.Fatalf("round of node %d: %v", i, err)
			}
		}
	}
	round() // every region announces itself

	if res, _ := a1.Ratelimit(ctx, req("own", limit, 60, d, time.Time{})); !res.Success {
		t.Fatal("a1 denied 60 of 100")
	}
	if res, _ := a1.Ratelimit(ctx, req("own", limit, 50, d, time.Time{})); res.Success {
		t.Fatal("a1 admitted 60 + 50 of 100")
	}
	a1.Flush() // the origin holds the 60
	clock.advance(time.Second)
	round() // a1 writes its row; a2 and b read it

	if res, _ := b.Ratelimit(ctx, req("own", limit, 0, d, time.Time{})); res.Current != 60 {
		t.Errorf("region b sees %d, want the 60 of a1's denial row", res.Current)
	}
	if res, _ := a2.Ratelimit(ctx, req("own", limit, 0, d, time.Time{})); res.Current != 60 {
		t.Errorf("a2 sees %d, want the region's 60 counted once", res.Current)
	}
	if res, _ := a2.Ratelimit(ctx, req("own", limit, 40, d, time.Time{})); !res.Success {
		t.Fatalf("a2 denied the 40 units left (current %d)", res.Current)
	}
	if res, _ := a2.Ratelimit(ctx, req("own", limit, 1, d, time.Time{})); res.Success {
		t.Fatal("a2 admitted past the limit")
	}
}

// heldPublishes is a global store whose Publish fails while on is set.
type heldPublishes struct {
	global.Store
	on atomic.Bool
}

func (s *heldPublishes) Publish(ctx context.Context, region string, counts []global.Count, now int64) error {
	if s.on.Load() {
		return global.ErrUnavailable
	}
	return s.Store.Publish(ctx, region, counts, now)
}

// everyDenial is a global store that breaks the contract of Denials the
// way a store without a region filter would: it returns the caller's own
// rows too.
type everyDenial struct{ global.Store }

func (s everyDenial) Denials(ctx context.Context, _ string, cursor global.Cursor, now int64) ([]global.Denial, global.Cursor, error) {
	return s.Store.Denials(ctx, "", cursor, now)
}

// TestRegionPublishesEachCountOnce runs two nodes of region "a" on one
// regional origin and a node of region "b", all on one global store. Both
// a-nodes hold the same regional count of a cell; the node whose round
// comes second reads the other's row back in its pull and does not write
// the same count again. Each new count of the region is written once,
// whichever node saw it, and region b imports the region's count.
func TestRegionPublishesEachCountOnce(t *testing.T) {
	const limit, d = 100, 10 * time.Minute
	clock := &virtualClock{}
	clock.set(4000*d.Milliseconds() + 1000)
	store := &rowsByRegion{Store: globalmemory.New(), rows: map[string]int{}}
	nodes := twoRegionsOneSharedOrigin(t, clock, store)
	a1, a2, b := nodes[0], nodes[1], nodes[2]
	ctx := context.Background()
	spend := func(n drivenNode, cost int64) {
		t.Helper()
		if res, _ := n.Ratelimit(ctx, req("shared", limit, cost, d, time.Time{})); !res.Success {
			t.Fatalf("denied %d (current %d)", cost, res.Current)
		}
		n.Flush() // the origin holds it
	}
	for _, step := range []struct {
		name    string
		act     func()
		rows    int   // region a's rows written so far
		importB int64 // what region b sees
	}{
		{"a1 spends 60, a2 reads the same 60", func() { spend(a1, 60); spend(a2, 0) }, 1, 60},
		{"a2 spends 10 more", func() { spend(a2, 10) }, 2, 70},
		{"nothing changes", func() {}, 2, 70},
		{"a1 reads the 70 a2 published", func() { spend(a1, 0) }, 2, 70},
	} {
		step.act()
		clock.advance(time.Second)
		syncAll(t, nodes)
		if got := store.of("a"); got != step.rows {
			t.Fatalf("%s: region a wrote %d rows, want %d", step.name, got, step.rows)
		}
		if res, _ := b.Ratelimit(ctx, req("shared", limit, 0, d, time.Time{})); res.Current != step.importB {
			t.Fatalf("%s: region b sees %d, want %d", step.name, res.Current, step.importB)
		}
	}
}

// TestPreviousCellReadByANewNodeFollowsTheRule has node a1 spend 10 of a
// limit of 100 in one window, a share of the headroom its region holds
// back. In the next window a2, which never served the counter, reads the
// previous cell's 10 from the origin when it hydrates the counter: it
// holds the previous cell with the counter's limit and holds its 10 back
// too, where with no limit it took the cell as over its limit and wrote
// the row.
func TestPreviousCellReadByANewNodeFollowsTheRule(t *testing.T) {
	const limit, d = 100, 10 * time.Minute
	clock := &virtualClock{}
	clock.set(4100*d.Milliseconds() + 1000)
	store := &rowsByRegion{Store: globalmemory.New(), rows: map[string]int{}}
	nodes := twoRegionsOneSharedOrigin(t, clock, store)
	a1, a2 := nodes[0], nodes[1]
	ctx := context.Background()
	if res, _ := a1.Ratelimit(ctx, req("quiet", limit, 10, d, time.Time{})); !res.Success {
		t.Fatal("a1 denied 10 of 100")
	}
	a1.Flush()
	clock.advance(time.Second)
	syncAll(t, nodes)
	if got := store.of("a"); got != 0 {
		t.Fatalf("region a wrote %d rows for 10 of 100, want 0", got)
	}
	clock.set(4101*d.Milliseconds() + 1000) // the next window
	if res, _ := a2.Ratelimit(ctx, req("quiet", limit, 1, d, time.Time{})); !res.Success || res.Remaining > limit-1-5 {
		t.Fatalf("a2: %+v, want the request admitted over the previous cell's weight", res)
	}
	clock.advance(time.Second)
	syncAll(t, nodes)
	if got := store.of("a"); got != 0 {
		t.Errorf("region a wrote %d rows after a2 read the previous cell, want 0", got)
	}
}

// twoRegionsOneSharedOrigin returns nodes a1 and a2 of region "a" on one
// regional origin and node b of region "b" without one, all on store, with
// their background rounds driven by the test, after a round in which every
// region announced itself.
func twoRegionsOneSharedOrigin(t *testing.T, clock *virtualClock, store global.Store) []drivenNode {
	t.Helper()
	shared := memory.New(clock.now)
	node := func(region string, o origin.Origin) drivenNode {
		l, h := newDriven(t, sluice.Config{Region: region, Global: &sluice.GlobalConfig{Store: store}, Origin: o, Clock: clock.now}, drive.Options{
			GlobalTicks: make(chan time.Time), // never fires: the test syncs
			ReplayTicks: make(chan time.Time), // likewise: the test flushes
		})
		return drivenNode{l, h}
	}
	nodes := []drivenNode{node("a", shared), node("a", shared), node("b", nil)}
	syncAll(t, nodes)
	return nodes
}

// rowsByRegion counts the count rows published per region.
type rowsByRegion struct {
	global.Store
	mu   sync.Mutex
	rows map[string]int
}

func (s *rowsByRegion) Publish(ctx context.Context, region string, counts []global.Count, now int64) error {
	s.mu.Lock()
	s.rows[region] += len(counts)
	s.mu.Unlock()
	return s.Store.Publish(ctx, region, counts, now)
}

func (s *rowsByRegion) of(region string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows[region]
}

// TestRegionAnnouncesEveryThreeIntervals runs two regions, a round per
// interval, for twelve intervals, idle or publishing a row in every round:
// either way each announces itself in every third round only (a publish
// does not announce), and each counts both regions present in every round,
// the first excepted, where the other region has not announced itself yet.
func TestRegionAnnouncesEveryThreeIntervals(t *testing.T) {
	const interval, limit = time.Second, 100
	tests := []struct {
		name          string
		perRound      int64 // requests each region admits before a round, on a fresh identifier
		wantPublishes int
	}{
		{"idle", 0, 0},
		{"publishing every round", limit / 2, 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &virtualClock{}
			clock.set(1_000_000)
			store := &writesByRegion{Store: globalmemory.New()}
			var nodes []drivenNode
			var regions []*regionsSeen
			for i := range 2 {
				seen := &regionsSeen{}
				l, h := newDriven(t, sluice.Config{Region: fmt.Sprintf("region-%d", i), Global: &sluice.GlobalConfig{Store: store, Interval: interval}, Clock: clock.now, Observer: seen},
					drive.Options{GlobalTicks: make(chan time.Time)})
				nodes, regions = append(nodes, drivenNode{l, h}), append(regions, seen)
			}
			for round := range 12 {
				for _, n := range nodes {
					if tt.perRound > 0 {
						if res, err := n.Ratelimit(context.Background(), req(fmt.Sprint("id-", round), limit, tt.perRound, time.Hour, time.Time{})); err != nil || !res.Success {
							t.Fatalf("round %d: %+v, %v", round, res, err)
						}
					}
				}
				syncAll(t, nodes)
				for i, seen := range regions {
					if seen.last != 2 && (round > 0 || i == 1) {
						t.Fatalf("round %d: region %d counts %d regions, want 2", round, i, seen.last)
					}
				}
				clock.advance(interval)
			}
			for _, r := range []string{"region-0", "region-1"} {
				if got := store.of(r, "announce"); got != 4 {
					t.Errorf("%s announced itself in %d of 12 rounds, want 4 (one in three)", r, got)
				}
				if got := store.of(r, "publish"); got != tt.wantPublishes {
					t.Errorf("%s published in %d of 12 rounds, want %d", r, got, tt.wantPublishes)
				}
			}
		})
	}
}

// regionsSeen keeps the regions present at the last global round.
type regionsSeen struct {
	ignoring
	last int
}

func (o *regionsSeen) GlobalRound(st sluice.GlobalStats) { o.last = st.Regions }

// writesByRegion counts the publishes and announces per region.
type writesByRegion struct {
	global.Store
	mu     sync.Mutex
	writes map[[2]string]int // region and "publish" or "announce"
}

func (s *writesByRegion) Publish(ctx context.Context, region string, counts []global.Count, now int64) error {
	s.count(region, "publish")
	return s.Store.Publish(ctx, region, counts, now)
}

func (s *writesByRegion) Announce(ctx context.Context, region string, now int64) error {
	s.count(region, "announce")
	return s.Store.Announce(ctx, region, now)
}

func (s *writesByRegion) count(region, call string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writes == nil {
		s.writes = map[[2]string]int{}
	}
	s.writes[[2]string{region, call}]++
}

func (s *writesByRegion) of(region, call string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[[2]string{region, call}]
}

// TestPublicationFollowsHeadroom walks one counter of two regions through
// the publication rule: a region writes a row once what it holds back,
// multiplied by its pace's factor 1 + 1.5 × interval / span (span: the
// time since its stored count last rose, or since the window began, one
// interval of 5 s at least and three at most), reaches 1/R of the headroom
// it sees (the limit less its stored count, the other region's and the
// previous cell's weight). A counter whose count last rose three intervals
// ago or more holds back a third of the headroom; one that grows within an
// interval publishes at a fifth of it. The share shrinks as the counts
// grow, to every change near the limit and at the start of a window that
// follows a full one.
func TestPublicationFollowsHeadroom(t *testing.T) {
	const limit, d = 1000, 10 * time.Minute
	clock := &virtualClock{}
	clock.set(5000 * d.Milliseconds())
	store := &recordingStore{Store: globalmemory.New(), max: map[string]int64{}}
	regions := newRegions(t, 2, store, clock, sluice.GlobalConfig{DisableDenials: true}, drive.Options{})
	syncAll(t, regions) // both announce
	syncAll(t, regions) // both count two regions
	ctx := context.Background()
	for _, step := range []struct {
		name   string
		region int
		cost   int64
		after  time.Duration // the clock moves on by this before the request
		stored [2]int64      // each region's stored count of the current cell after a round
	}{
		{"333 over 5 minutes: 333 × 1.5 × 2 is under 1000", 0, 333, 5 * time.Minute, [2]int64{0, 0}},
		{"334 reaches it", 0, 1, 0, [2]int64{334, 0}},
		{"133 at once: 133 × 2.5 × 2 is under 1000-334", 0, 133, 0, [2]int64{334, 0}},
		{"134 reaches it", 0, 1, 0, [2]int64{468, 0}},
		{"region 1, 177 over 5 minutes: 177 × 3 is under 1000-468", 1, 177, 0, [2]int64{468, 0}},
		{"178 reaches it", 1, 1, 0, [2]int64{468, 178}},
		{"a minute on, 117 × 3 is under 1000-468-178", 0, 117, time.Minute, [2]int64{468, 178}},
		{"118 reaches it", 0, 1, 0, [2]int64{586, 178}},
		{"region 1 a minute on: 78 × 3 is under 236", 1, 78, 0, [2]int64{586, 178}},
		{"79 reaches it", 1, 1, 0, [2]int64{586, 257}},
		{"region 0 at once: 31 × 5 is under 157", 0, 31, 0, [2]int64{586, 257}},
		{"32 reaches it", 0, 1, 0, [2]int64{618, 257}},
		{"region 1 spends 118 at once, over a fifth of 125", 1, 118, 0, [2]int64{618, 375}},
		{"headroom 7: 1 × 5 is under it", 0, 1, 0, [2]int64{618, 375}},
		{"2 reach it", 0, 1, 0, [2]int64{620, 375}},
		{"headroom 5: every change", 0, 1, 0, [2]int64{621, 375}},
		{"0.6 s into the next window, the previous cell weighing 995 of 996", 0, 1, 4*time.Minute + d/1000, [2]int64{1, 0}},
	} {
		clock.advance(step.after)
		if res, _ := regions[step.region].Ratelimit(ctx, req("shared", limit, step.cost, d, time.Time{})); !res.Success {
			t.Fatalf("%s: denied (current %d)", step.name, res.Current)
		}
		syncAll(t, regions)
		seq := clock.ms.Load() / d.Milliseconds()
		for i, want := range step.stored {
			if got := store.cellOf(fmt.Sprintf("region-%d", i), "shared", seq); got != want {
				t.Fatalf("%s: region %d stored %d, want %d", step.name, i, got, want)
			}
		}
	}
}
