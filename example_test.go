package sluice_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin/redis"
)

// The embedded default: one process, in memory, no dependency.
func Example() {
	l, err := sluice.New(sluice.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	res, err := l.Ratelimit(context.Background(), sluice.Request{
		Namespace:  "api",
		Identifier: "user-42",
		Limit:      100,
		Duration:   time.Minute,
		Cost:       1,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Success, res.Remaining)
	// Output: true 99
}

// A denial counts nothing. Reset is the end of the current fixed window, not
// the moment a retry passes: the usage of a window keeps weighing, fading
// linearly, through the next one, so a retry at Reset is denied here and
// one half a window later passes.
func ExampleLimiter_Ratelimit_denial() {
	l, err := sluice.New(sluice.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()

	at := time.Date(2026, 1, 2, 12, 0, 30, 0, time.UTC)
	req := sluice.Request{Namespace: "login", Identifier: "alice", Limit: 3, Duration: time.Minute, Cost: 1, Time: at}
	var res sluice.Response
	for range 4 {
		res, err = l.Ratelimit(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Success, res.Remaining, res.Reset.Format(time.TimeOnly))
	}
	for _, retry := range []time.Time{res.Reset, res.Reset.Add(30 * time.Second)} {
		req.Time = retry
		res, err = l.Ratelimit(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(retry.Format(time.TimeOnly), res.Success, res.Remaining)
	}
	// Output:
	// true 2 12:01:00
	// true 1 12:01:00
	// true 0 12:01:00
	// false 0 12:01:00
	// 12:01:00 false 0
	// 12:01:30 true 1
}

// A denial can leave Remaining above 0: a request costing more than is
// left is denied, and Remaining says what is left.
func ExampleLimiter_Ratelimit_cost() {
	l, err := sluice.New(sluice.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()

	at := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	for _, cost := range []int64{95, 10, 5} {
		res, err := l.Ratelimit(ctx, sluice.Request{Namespace: "upload", Identifier: "bob", Limit: 100, Duration: time.Hour, Cost: cost, Time: at})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(cost, res.Success, res.Remaining)
	}
	// Output:
	// 95 true 5
	// 10 false 5
	// 5 true 0
}

// RatelimitMany is all-or-nothing: one denial rolls back every increment of
// the batch.
func ExampleLimiter_RatelimitMany() {
	l, err := sluice.New(sluice.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()

	at := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	user := sluice.Request{Namespace: "api", Identifier: "user-42", Limit: 10, Duration: time.Minute, Cost: 1, Time: at}
	org := sluice.Request{Namespace: "api", Identifier: "org-7", Limit: 1, Duration: time.Minute, Cost: 2, Time: at}
	res, err := l.RatelimitMany(ctx, []sluice.Request{user, org})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res[0].Success, res[1].Success)

	user.Cost = 0 // peek: the user's increment was rolled back
	peek, err := l.Ratelimit(ctx, user)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(peek.Remaining)
	// Output:
	// true false
	// 10
}

// Several processes of a region converge through one regional origin; here
// Redis (single node, Sentinel or Cluster, by URL).
func Example_redisOrigin() {
	client, err := redis.NewClient("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	o, err := redis.New(redis.Config{Client: client})
	if err != nil {
		log.Fatal(err)
	}
	defer o.Close()

	l, err := sluice.New(sluice.Config{Region: "eu-west", Origin: o})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close() // replays the increments not yet sent to Redis

	res, err := l.Ratelimit(context.Background(), sluice.Request{Namespace: "api", Identifier: "user-42", Limit: 100, Duration: time.Minute, Cost: 1})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Success)
}

// A custom Clock decides requests that carry no Time: here a fixed instant,
// as in a test.
func ExampleConfig_clock() {
	now := time.Date(2026, 1, 2, 12, 0, 45, 0, time.UTC)
	l, err := sluice.New(sluice.Config{Clock: func() time.Time { return now }})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	res, err := l.Ratelimit(context.Background(), sluice.Request{Namespace: "api", Identifier: "user-42", Limit: 5, Duration: time.Minute, Cost: 1})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Remaining, res.Reset.UTC().Format(time.TimeOnly))
	// Output: 4 12:01:00
}

// A token budget: each call checks the budget with one token before it
// asks the model, then reports the tokens the answer used. The report is
// counted even past the budget, so the next check is denied until the
// window lets it through (docs/howto/token-budgets.md).
func ExampleLimiter_Report() {
	l, err := sluice.New(sluice.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()

	at := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	budget := sluice.Request{Namespace: "llm.tokens", Identifier: "team-7", Limit: 1000, Duration: time.Hour, Time: at}
	for _, used := range []int64{600, 700, 100} { // what each answer turns out to cost
		check := budget
		check.Cost = 1
		res, err := l.Ratelimit(ctx, check)
		if err != nil {
			log.Fatal(err)
		}
		if !res.Success {
			fmt.Println("budget spent:", res.Current, "of", res.Limit)
			continue
		}
		report := budget
		report.Cost = used // known once the answer is written
		res, err = l.Report(ctx, report)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("reported", used, "->", res.Current, "used,", res.Remaining, "left")
	}
	// Output:
	// reported 600 -> 601 used, 399 left
	// reported 700 -> 1302 used, 0 left
	// budget spent: 1302 of 1000
}
