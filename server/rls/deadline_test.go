package rls

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin"
)

// hangingOrigin never answers: every call waits for its context to end.
type hangingOrigin struct{}

func (hangingOrigin) Load(ctx context.Context, _ origin.Key, _ int64) (origin.Counts, error) {
	<-ctx.Done()
	return origin.Counts{}, ctx.Err()
}

func (hangingOrigin) Apply(ctx context.Context, _ []origin.Delta) ([]origin.Total, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hangingOrigin) Decide(ctx context.Context, _ origin.Check) (origin.Verdict, error) {
	<-ctx.Done()
	return origin.Verdict{}, ctx.Err()
}

func (hangingOrigin) Withdraw(ctx context.Context, _ origin.Cell, _ origin.Writer) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestShadowChecksShareOneDeadline sends a call of one enforced, 20
// shadow-mode and one report descriptors, every counter cold, to a limiter
// whose origin hangs and a caller with no deadline: the call waits one
// OriginTimeout in all (virtual time), where each shadow check used to
// wait its own.
func TestShadowChecksShareOneDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := sluice.New(sluice.Config{Origin: hangingOrigin{}, FlushTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		rs := mustParse(t, `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: watch
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tokens
    report: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
`)
		svc, err := New(Config{Limiter: l, Domains: rs})
		if err != nil {
			t.Fatal(err)
		}
		ds := []*ratelimitv3.RateLimitDescriptor{desc("user=u"), withHits(desc("tokens=t"), 900)}
		for i := range 20 {
			ds = append(ds, desc(fmt.Sprintf("watch=w%d", i)))
		}
		start := time.Now()
		if _, err := svc.ShouldRateLimit(context.Background(), req("d", 1, ds...)); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited > DefaultOriginTimeout {
			t.Errorf("a call of 22 cold checks waited %v on a hanging origin, want at most %v", waited, DefaultOriginTimeout)
		}
	})
}
