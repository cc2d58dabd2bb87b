package sluice_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/drive"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/memory"
)

// gatedOrigin holds every Apply until release is closed: before the
// increments reach the origin (the replay is in flight, for as long as a
// test needs), or, with landed, after they did (the replay has landed and
// the limiter does not know it yet).
type gatedOrigin struct {
	origin.Origin
	landed  bool
	reached chan struct{} // closed when the first Apply reached the gate
	release chan struct{}
	once    sync.Once
	closing sync.Once
}

func newGatedOrigin(landed bool) *gatedOrigin {
	return &gatedOrigin{Origin: memory.New(nil), landed: landed, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedOrigin) Apply(ctx context.Context, ds []origin.Delta) ([]origin.Total, error) {
	if g.landed {
		totals, err := g.Origin.Apply(ctx, ds)
		g.once.Do(func() { close(g.reached) })
		<-g.release
		return totals, err
	}
	g.once.Do(func() { close(g.reached) })
	<-g.release
	return g.Origin.Apply(ctx, ds)
}

// open lets every Apply through; it may be called more than once.
func (g *gatedOrigin) open() { g.closing.Do(func() { close(g.release) }) }

// spendNineOfTen admits 9 units of a limit of 10 locally on a limiter over
// g, with a margin of 10% (so that the 10th unit and after are decided at
// the origin), and waits until their replay reaches g's gate. It returns
// the limiter and the request.
func spendNineOfTen(t *testing.T, g *gatedOrigin) (*sluice.Limiter, sluice.Request) {
	t.Helper()
	l := newLimiter(t, sluice.Config{Origin: g, RefreshAfter: time.Hour, OriginMargin: 0.1})
	t.Cleanup(g.open) // before the limiter's Close, which flushes
	r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 10, Duration: time.Hour, Cost: 1, Time: time.Now()}
	for i := range 9 {
		if res, err := l.Ratelimit(context.Background(), r); err != nil || !res.Success {
			t.Fatalf("unit %d: %+v, %v", i+1, res, err)
		}
	}
	select {
	case <-g.reached:
	case <-time.After(5 * time.Second):
		t.Fatal("the replay of the first 9 units did not reach the origin")
	}
	return l, r
}

// TestOriginDecisionSeesReplayInFlight holds the replay of 9 units of a
// limit of 10 in flight past the decision's OriginTimeout. The 10th unit
// passes; the 11th must not: this node has admitted the limit already,
// whether or not its replay has landed.
func TestOriginDecisionSeesReplayInFlight(t *testing.T) {
	l, r := spendNineOfTen(t, newGatedOrigin(false))
	ctx := context.Background()
	tenth, err := l.Ratelimit(ctx, r)
	if err != nil || !tenth.Success {
		t.Fatalf("unit 10: %+v, %v; want admitted", tenth, err)
	}
	if res, err := l.Ratelimit(ctx, r); err != nil || res.Success {
		t.Fatalf("unit 11 of a limit of 10: %+v, %v; want a denial (unit 10 was answered with Current %d)", res, err, tenth.Current)
	}
	if tenth.Current != 10 {
		t.Errorf("unit 10 answered with Current %d, want 10", tenth.Current)
	}
}

// TestOriginDecisionAfterReplayLanded lets the replay of 9 units of a limit
// of 10 land at the origin, but holds its reply for 50 ms. The 10th unit,
// decided at the origin meanwhile, must pass with Current 10: the 9 units
// count once, not once at the origin and again as in flight.
func TestOriginDecisionAfterReplayLanded(t *testing.T) {
	g := newGatedOrigin(true)
	l, r := spendNineOfTen(t, g)
	ctx := context.Background()
	time.AfterFunc(50*time.Millisecond, g.open)
	tenth, err := l.Ratelimit(ctx, r)
	if err != nil || !tenth.Success || tenth.Current != 10 {
		t.Fatalf("unit 10 of a limit of 10: %+v, %v; want admitted with Current 10", tenth, err)
	}
	if res, err := l.Ratelimit(ctx, r); err != nil || res.Success {
		t.Fatalf("unit 11 of a limit of 10: %+v, %v; want a denial", res, err)
	}
}

// decisionGate holds every Decide until release is closed; reached is
// closed when the first one arrives.
type decisionGate struct {
	origin.Origin
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *decisionGate) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	g.once.Do(func() { close(g.reached) })
	<-g.release
	return g.Origin.Decide(ctx, c)
}

// twoOfTenInFlight spends 8 units of a limit of 10 (request r, cost 1)
// locally on a limiter whose origin decisions wait at g, with a margin of
// 10%, then sends 2 units, which are decided at the origin, and returns
// once their decision waits at g's gate; decided receives their answer
// once g.release is closed.
func twoOfTenInFlight(t *testing.T) (l *sluice.Limiter, r sluice.Request, g *decisionGate, decided <-chan sluice.Response) {
	t.Helper()
	g = &decisionGate{Origin: memory.New(nil), reached: make(chan struct{}), release: make(chan struct{})}
	l = newLimiter(t, sluice.Config{Origin: g, RefreshAfter: time.Hour, OriginMargin: 0.1, OriginTimeout: time.Minute})
	ctx := context.Background()
	r = sluice.Request{Namespace: "n", Identifier: "u", Limit: 10, Duration: time.Hour, Cost: 1, Time: time.Now()}
	for i := range 8 {
		if res, err := l.Ratelimit(ctx, r); err != nil || !res.Success {
			t.Fatalf("unit %d: %+v, %v", i+1, res, err)
		}
	}
	two := r
	two.Cost = 2
	answer := make(chan sluice.Response, 1)
	go func() {
		res, _ := l.Ratelimit(ctx, two) // 10 > 10 - margin: decided at the origin
		answer <- res
	}()
	<-g.reached
	return l, r, g, answer
}

// TestBatchCountsDecisionInFlight holds an origin decision for 2 units of
// a limit of 10 in flight, with 8 spent, while a batch of two single units
// on the same counter is decided locally. The batch must count the 2 units
// as spent and fail: the origin admits them, and the batch's two units
// would take the counter to 12.
func TestBatchCountsDecisionInFlight(t *testing.T) {
	l, r, g, decided := twoOfTenInFlight(t)
	ctx := context.Background()
	out, err := l.RatelimitMany(ctx, []sluice.Request{r, r})
	close(g.release)
	if err != nil {
		t.Fatal(err)
	}
	if res := <-decided; !res.Success || res.Current != 10 {
		t.Fatalf("the 2 units decided at the origin: %+v, want admitted with Current 10", res)
	}
	if out[0].Success && out[1].Success {
		t.Fatalf("a batch of 2 units passed while 2 of the last 2 were being admitted at the origin: %+v", out)
	}
	peek := r
	peek.Cost = 0
	if res, err := l.Ratelimit(ctx, peek); err != nil || res.Current != 10 {
		t.Fatalf("count after the decision: %+v, %v; want 10", res, err)
	}
}

// TestBatchDeniedBesideDecisionTakesNothingBack holds an origin decision
// for 2 units of a limit of 10 in flight, with 8 spent, while a batch asks
// for 2 more (and 1 of a counter of its own). Its local view (8 + 2)
// brings it within the margin, so it is meant for the origin, but counting
// the 2 units in flight it is denied here, and it added nothing to the
// count: it must take nothing back. (A batch took back the units it had
// not added, which lowered the count by them and let later requests
// through past the limit.)
func TestBatchDeniedBesideDecisionTakesNothingBack(t *testing.T) {
	l, r, g, decided := twoOfTenInFlight(t)
	ctx := context.Background()
	two := r
	two.Cost = 2
	side := r
	side.Identifier = "side" // a batch of two takes the batch path
	out, err := l.RatelimitMany(ctx, []sluice.Request{two, side})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Success {
		t.Errorf("2 units passed while the last 2 were being admitted at the origin: %+v", out[0])
	}
	peek := r
	peek.Cost = 0
	if res, err := l.Ratelimit(ctx, peek); err != nil || res.Current != 8 {
		t.Errorf("count after the batch was denied: %+v, %v; want 8", res, err)
	}
	close(g.release)
	if res := <-decided; !res.Success || res.Current != 10 {
		t.Fatalf("the 2 units decided at the origin: %+v, want admitted with Current 10", res)
	}
}

// TestReplayLandingAfterDecisionCountsOnce holds the replay of 9 units of a
// limit of 10 in flight until the 10th unit has been decided at the origin,
// then lets it land: the origin already holds the writer's 10 (the decision
// carried the 9 and added 1), so the replay adds nothing and answers 10.
// Merged, that total must leave the count at 10, not count the 10th unit
// again as admitted beyond the 9 the replay sent (the count 11 that denied
// a cluster's 10th request in 1 of a few hundred runs).
func TestReplayLandingAfterDecisionCountsOnce(t *testing.T) {
	g := newGatedOrigin(false)
	ticks := make(chan time.Time) // never fires: the test runs the replays
	l, h := newDriven(t, sluice.Config{Origin: g, RefreshAfter: time.Hour, OriginMargin: 0.1}, drive.Options{ReplayTicks: ticks})
	t.Cleanup(g.open) // before the limiter's Close, which flushes
	ctx := context.Background()
	r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 10, Duration: time.Hour, Cost: 1, Time: time.Now()}
	for i := range 9 {
		if res, err := l.Ratelimit(ctx, r); err != nil || !res.Success {
			t.Fatalf("unit %d: %+v, %v", i+1, res, err)
		}
	}
	flushed := make(chan struct{})
	go func() { h.Flush(); close(flushed) }()
	<-g.reached // the replay of the 9 units waits at the gate
	if tenth, err := l.Ratelimit(ctx, r); err != nil || !tenth.Success || tenth.Current != 10 {
		t.Fatalf("unit 10, decided at the origin: %+v, %v; want admitted with Current 10", tenth, err)
	}
	g.open()
	<-flushed // the replay landed and its total is merged
	peek := r
	peek.Cost = 0
	if res, err := l.Ratelimit(ctx, peek); err != nil || res.Current != 10 {
		t.Fatalf("count after the replay landed: %+v, %v; want 10", res, err)
	}
}

// answerGate makes every Decide at the origin at once and holds its answer
// until release is closed; reached is closed when the first one was made.
type answerGate struct {
	origin.Origin
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *answerGate) Decide(ctx context.Context, c origin.Check) (origin.Verdict, error) {
	v, err := g.Origin.Decide(ctx, c)
	g.once.Do(func() { close(g.reached) })
	<-g.release
	return v, err
}

// TestReplayAnsweredBeforeDecisionCountsOnce sends the replay of 4 units of
// a limit of 10 and holds it before the origin; 5 more units are admitted
// locally, and the 10th is decided at the origin, whose answer is held.
// The replay then lands above the decision (the origin holds the writer's
// 10 already, and answers 10) and is merged while the decision is still
// in flight: the 5 units admitted after the replay was sent are in that
// total, through the decision, and must not be added to it again. Once the
// decision is answered, the count is 10.
func TestReplayAnsweredBeforeDecisionCountsOnce(t *testing.T) {
	decisions := &answerGate{Origin: memory.New(nil), reached: make(chan struct{}), release: make(chan struct{})}
	g := &gatedOrigin{Origin: decisions, reached: make(chan struct{}), release: make(chan struct{})}
	ticks := make(chan time.Time) // never fires: the test runs the replays
	l, h := newDriven(t, sluice.Config{Origin: g, RefreshAfter: time.Hour, OriginMargin: 0.1}, drive.Options{ReplayTicks: ticks})
	t.Cleanup(g.open)
	ctx := context.Background()
	r := sluice.Request{Namespace: "n", Identifier: "u", Limit: 10, Duration: time.Hour, Cost: 1, Time: time.Now()}
	spend := func(from, to int) {
		for i := from; i <= to; i++ {
			if res, err := l.Ratelimit(ctx, r); err != nil || !res.Success {
				t.Fatalf("unit %d: %+v, %v", i, res, err)
			}
		}
	}
	spend(1, 4)
	flushed := make(chan struct{})
	go func() { h.Flush(); close(flushed) }()
	<-g.reached // the replay of 4 units waits before the origin
	spend(5, 9)
	tenth := make(chan sluice.Response, 1)
	go func() {
		res, _ := l.Ratelimit(ctx, r) // 10 > 10 - margin: decided at the origin
		tenth <- res
	}()
	<-decisions.reached // the origin holds 10 of the writer; the answer waits
	g.open()
	<-flushed // the replay landed and its total (10) is merged
	close(decisions.release)
	if res := <-tenth; !res.Success || res.Current != 10 {
		t.Fatalf("unit 10, decided at the origin: %+v; want admitted with Current 10", res)
	}
	peek := r
	peek.Cost = 0
	if res, err := l.Ratelimit(ctx, peek); err != nil || res.Current != 10 {
		t.Fatalf("count after the decision was answered: %+v, %v; want 10", res, err)
	}
}
