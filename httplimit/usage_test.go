package httplimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

// counted returns what key has spent under p, read through l with a peek
// under the largest limit the server takes (the limit is not part of a
// counter's identity), so that a count past p's limit reads whole.
func counted(t *testing.T, l httplimit.Limiter, p httplimit.Policy, key string) int64 {
	t.Helper()
	const big = 1<<53 - 1
	d, err := l.Limit(context.Background(), httplimit.Request{Namespace: p.Name, Identifier: key, Limit: big, Window: p.Window})
	if err != nil {
		t.Fatal(err)
	}
	return big - d.Remaining
}

// TestUsageAfterTheHandler serves an LLM-style handler behind the
// middleware, with each backend: each request checks one token before it
// runs (Config.Cost), the handler answers with 1 to 800 tokens drawn at
// random and adds them with AddUsage, and the client sends requests one at
// a time until it is denied. Nothing reported is lost (the counter ends at
// the admitted checks plus the reported tokens), the budget of 10,000
// tokens is used up and exceeded by at most the largest answer.
func TestUsageAfterTheHandler(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			l := b.new(t)
			p := httplimit.Policy{Name: policyName(t), Limit: 10_000, Window: 30 * 24 * time.Hour}
			var errs []error
			mw, err := httplimit.New(httplimit.Config{Limiter: l, Policy: p,
				Cost:    func(*http.Request) int64 { return 1 },
				OnError: func(_ *http.Request, err error) { errs = append(errs, err) }})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 40))
			var tokens int64
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tokens = 1 + rng.Int64N(800) // the model's answer
				if !httplimit.AddUsage(r.Context(), tokens) {
					t.Error("AddUsage refused in an allowed request")
				}
				_, _ = w.Write([]byte("an answer"))
			}))
			var checked, reported, largest int64
			for range 1000 {
				w := send(h, "/", "192.0.2.1:1000", nil)
				if w.Code == http.StatusTooManyRequests {
					break
				}
				checked++
				reported += tokens
				largest = max(largest, tokens)
			}
			got := counted(t, l, p, "192.0.2.1")
			switch {
			case len(errs) > 0:
				t.Fatalf("errors: %v", errs)
			case got != checked+reported:
				t.Fatalf("the counter holds %d, the checks and reports %d + %d", got, checked, reported)
			case got < p.Limit || got > p.Limit+largest:
				t.Fatalf("the counter holds %d, want between the budget %d and one answer more (%d)", got, p.Limit, p.Limit+largest)
			}
		})
	}
}

// TestAddUsage: usage added by a handler is reported once it returns, past
// the limit, so the next request is denied; AddUsage refuses where nothing
// would report it; a Limiter that is not a Reporter reports
// ErrCannotReport through OnError and serves the request all the same.
func TestAddUsage(t *testing.T) {
	notReporter := httplimit.LimiterFunc(func(context.Context, httplimit.Request) (httplimit.Decision, error) {
		return httplimit.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil
	})
	tests := []struct {
		name      string
		limiter   func(t *testing.T) httplimit.Limiter
		unlimited bool  // PolicyFunc leaves the request unlimited
		add       int64 // what the handler adds
		wantAdded bool  // AddUsage's answer
		wantNext  int   // the status of the next request
		wantErr   error // what OnError gets
	}{
		{"usage past the limit denies the next request", backends[0].new, false, 20, true, http.StatusTooManyRequests, nil},
		{"usage within the limit", backends[0].new, false, 3, true, http.StatusOK, nil},
		{"a negative amount is refused", backends[0].new, false, -1, false, http.StatusOK, nil},
		{"an unlimited request has nothing to report", backends[0].new, true, 20, false, http.StatusOK, nil},
		{"a limiter that cannot report", func(*testing.T) httplimit.Limiter { return notReporter }, false, 20, true, http.StatusOK, httplimit.ErrCannotReport},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var reported error
			cfg := httplimit.Config{Limiter: tc.limiter(t), Policy: httplimit.Policy{Name: policyName(t), Limit: 10, Window: time.Minute},
				OnError: func(_ *http.Request, err error) { reported = err }}
			if tc.unlimited {
				cfg.PolicyFunc = func(*http.Request) (httplimit.Policy, bool) { return httplimit.Policy{}, false }
			}
			mw, err := httplimit.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var added bool
			h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			first := mw.Wrap(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { added = httplimit.AddUsage(r.Context(), tc.add) }))
			if w := send(first, "/", "192.0.2.1:1000", nil); w.Code != http.StatusOK {
				t.Fatalf("first request: status %d", w.Code)
			}
			if w := send(h, "/", "192.0.2.1:1000", nil); added != tc.wantAdded || w.Code != tc.wantNext {
				t.Fatalf("AddUsage %v, next request %d; want %v and %d", added, w.Code, tc.wantAdded, tc.wantNext)
			}
			if !errors.Is(reported, tc.wantErr) {
				t.Fatalf("OnError got %v, want %v", reported, tc.wantErr)
			}
		})
	}
	if httplimit.AddUsage(context.Background(), 1) {
		t.Error("AddUsage accepted usage outside the middleware")
	}
}
