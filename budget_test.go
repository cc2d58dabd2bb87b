package sluice_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin/memory"
)

// A token budget, as an LLM gateway keeps one: each call checks the
// budget before it asks the model (a peek, or a small cost), and reports
// the tokens the answer spent once it is known (Limiter.Report), which
// counts them even when they take the budget past its limit.

// budgetRun is what one node of a token-budget run did.
type budgetRun struct {
	checked   int64 // the costs its checks spent
	reported  int64 // the tokens it reported
	answers   int   // the calls it served
	maxAnswer int64 // its largest answer, in tokens
}

// serveBudget is one node's LLM-style handler in a loop, one call at a
// time: check the budget with a request of cost check, and stop at the
// first denial (the window is longer than the run: nothing comes back);
// otherwise let the model answer for 50 to 500 ms, then report its 1 to
// maxTokens tokens.
func serveBudget(t *testing.T, l *sluice.Limiter, budget sluice.Request, check, maxTokens int64, rng *rand.Rand) budgetRun {
	ctx := context.Background()
	var run budgetRun
	for {
		r := budget
		r.Cost = check
		res, err := l.Ratelimit(ctx, r)
		if err != nil {
			t.Error(err)
			return run
		}
		if !res.Success {
			return run
		}
		run.checked += check
		time.Sleep(time.Duration(50+rng.IntN(451)) * time.Millisecond) // the model answers
		tokens := 1 + rng.Int64N(maxTokens)
		r.Cost = tokens
		if _, err := l.Report(ctx, r); err != nil {
			t.Error(err)
			return run
		}
		run.reported += tokens
		run.answers++
		run.maxAnswer = max(run.maxAnswer, tokens)
	}
}

// TestTokenBudget runs LLM-style handlers against one token budget (10,000
// tokens an hour; answers of 1 to 800 tokens, drawn at random; the model
// answering in 50 to 500 ms of virtual time) on one node, and on two and
// three nodes sharing one memory origin with every check decided there
// (OriginMargin 1). Each node serves one call at a time until its check is
// denied. Over 20 seeded runs of each:
//
//   - nothing reported is lost: once the nodes are closed, the counter
//     holds exactly the tokens reported plus the costs the checks spent;
//   - the budget is exceeded by at most one answer per node: the counter
//     ends at most budget + the largest answer of each node (a check at
//     the origin sees every report but the latest of each other node,
//     which may still be on its way, and its own node's count whole);
//   - the budget is used up: the counter ends at the budget or above.
func TestTokenBudget(t *testing.T) {
	tests := []struct {
		name   string
		nodes  int
		origin bool
		check  int64 // the cost of the check before each call
	}{
		{"one embedded node peeks", 1, false, 0},
		{"one embedded node checks a token", 1, false, 1},
		{"two nodes on one origin check a token", 2, true, 1},
		{"three nodes on one origin check a token", 3, true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(20) {
				synctest.Test(t, func(t *testing.T) {
					budgetRound(t, tc.nodes, tc.origin, tc.check, seed)
				})
			}
		})
	}
}

// budgetRound is one run of TestTokenBudget with the nodes, origin, check
// cost and seed given.
func budgetRound(t *testing.T, nodes int, withOrigin bool, check int64, seed uint64) {
	const limit, maxTokens = 10_000, 800
	budget := sluice.Request{Namespace: "llm", Identifier: "team-7", Limit: limit, Duration: time.Hour}
	cfg := sluice.Config{}
	var o *memory.Store
	if withOrigin {
		o = memory.New(nil)
		cfg = sluice.Config{Origin: o, OriginMargin: 1}
	}
	ls := make([]*sluice.Limiter, nodes)
	for i := range ls {
		l, err := sluice.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	start := time.Now() // synctest's epoch: the runs stay within this hour's window
	runs := make([]budgetRun, nodes)
	var wg sync.WaitGroup
	for i, l := range ls {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() { runs[i] = serveBudget(t, l, budget, check, maxTokens, rng) })
	}
	wg.Wait()
	var want, bound int64 = 0, limit
	for _, run := range runs {
		want += run.checked + run.reported
		bound += run.maxAnswer
	}
	total := budgetTotal(t, ls[0], o, budget)
	for _, l := range ls[1:] {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if withOrigin {
		at := budget
		at.Time = start
		total = originTotal(t, o, at)
	}
	desc := fmt.Sprintf("seed %d, %+v", seed, runs)
	switch {
	case total != want:
		t.Fatalf("%s: the counter holds %d, the checks spent and the answers reported %d", desc, total, want)
	case total > bound:
		t.Fatalf("%s: the counter holds %d, over the budget of %d by more than one answer per node (%d)", desc, total, limit, bound)
	case total < limit:
		t.Fatalf("%s: the counter holds %d: the budget of %d was not used up", desc, total, limit)
	}
}

// budgetTotal closes l and returns the budget's count: without an origin,
// l's own (a peek just before Close), else 0 (the caller reads the origin
// once every node is closed).
func budgetTotal(t *testing.T, l *sluice.Limiter, o *memory.Store, budget sluice.Request) int64 {
	var total int64
	if o == nil {
		budget.Cost = 0
		res, err := l.Ratelimit(context.Background(), budget)
		if err != nil {
			t.Fatal(err)
		}
		total = res.Current
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return total
}
