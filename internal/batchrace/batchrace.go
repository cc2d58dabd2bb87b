// Package batchrace races limiters that share one regional origin for the
// last units of a few counters with all-or-nothing batches
// (sluice.Limiter.RatelimitMany), and checks that no counter is spent past
// its limit and that the origin holds exactly what was admitted. Tests of
// each origin run it (see sluice's batch tests and origin/cluster's).
package batchrace

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin"
)

// Config is one race.
type Config struct {
	// Origins are the region's nodes' views of the origin: one limiter is
	// built on each. Two or more.
	Origins []origin.Origin
	// Senders send batches at once, each one batch at a time (1:
	// sequential).
	Senders int
	// Batches is the number of batches each sender sends.
	Batches int
	// Counters is the number of counters; each batch asks for 2 to 5 of
	// them (at most Counters), distinct, cost 1 each.
	Counters int
	// Limit is each counter's limit in its one-hour window.
	Limit int64
	// Primed units of each counter are spent before the race, through a
	// limiter on the first origin that is closed (so they reach the
	// origin) before the racing limiters start: they then race for the
	// last Limit − Primed units, from views that start near the limit.
	Primed int64
	// Limiter is the configuration of every limiter, Origin aside.
	Limiter sluice.Config
}

// Result is what a race admitted and what the origin holds, per counter.
type Result struct {
	Admitted []int64
	Held     []int64
}

// Run races cfg and fails t if a counter was admitted past its limit or
// the origin holds other than what was admitted once every limiter is
// closed. It returns the figures.
func Run(t testing.TB, cfg Config) Result {
	t.Helper()
	seed := time.Now().UnixNano()
	t.Logf("batchrace: seed %d", seed)
	start := time.Now()
	run := fmt.Sprintf("%s-%d", t.Name(), seed)
	req := func(c int) sluice.Request {
		return sluice.Request{Namespace: "batchrace", Identifier: fmt.Sprintf("%s-%d", run, c),
			Limit: cfg.Limit, Duration: time.Hour, Cost: cfg.Primed, Time: start}
	}
	res := Result{Admitted: make([]int64, cfg.Counters), Held: make([]int64, cfg.Counters)}
	if cfg.Primed > 0 {
		prime(t, cfg, req, res.Admitted)
	}
	limiters := make([]*sluice.Limiter, len(cfg.Origins))
	for i, o := range cfg.Origins {
		lc := cfg.Limiter
		lc.Origin = o
		l, err := sluice.New(lc)
		if err != nil {
			t.Fatal(err)
		}
		limiters[i] = l
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for s := range cfg.Senders {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(s)))
		wg.Go(func() {
			for range cfg.Batches {
				picked := rng.Perm(cfg.Counters)[:min(cfg.Counters, 2+rng.IntN(4))]
				rs := make([]sluice.Request, len(picked))
				for i, c := range picked {
					rs[i] = req(c)
					rs[i].Cost = 1
				}
				out, err := limiters[rng.IntN(len(limiters))].RatelimitMany(context.Background(), rs)
				if err != nil {
					t.Errorf("batch: %v", err)
					return
				}
				if passed(out) {
					mu.Lock()
					for _, c := range picked {
						res.Admitted[c]++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, l := range limiters {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	for c := range cfg.Counters {
		r := req(c)
		key := origin.Key{Namespace: r.Namespace, Identifier: r.Identifier, Duration: r.Duration}
		counts, err := cfg.Origins[0].Load(context.Background(), key, start.UnixMilli()/time.Hour.Milliseconds())
		if err != nil {
			t.Fatalf("reading counter %d: %v", c, err)
		}
		res.Held[c] = counts.Current
		if res.Admitted[c] > cfg.Limit || res.Held[c] != res.Admitted[c] {
			t.Errorf("counter %d (limit %d): admitted %d, the origin holds %d", c, cfg.Limit, res.Admitted[c], res.Held[c])
		}
	}
	t.Logf("batchrace: admitted %v, held %v (limit %d)", res.Admitted, res.Held, cfg.Limit)
	return res
}

// prime spends cfg.Primed units of each counter (req's cost) through a
// limiter on the first origin, closed before it returns, and records them
// in admitted.
func prime(t testing.TB, cfg Config, req func(c int) sluice.Request, admitted []int64) {
	t.Helper()
	lc := cfg.Limiter
	lc.Origin = cfg.Origins[0]
	l, err := sluice.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	for c := range cfg.Counters {
		if res, err := l.Ratelimit(context.Background(), req(c)); err != nil || !res.Success {
			t.Fatalf("priming counter %d: %+v, %v", c, res, err)
		}
		admitted[c] = cfg.Primed
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// passed reports whether every response of a batch passed.
func passed(out []sluice.Response) bool {
	for _, r := range out {
		if !r.Success {
			return false
		}
	}
	return true
}
