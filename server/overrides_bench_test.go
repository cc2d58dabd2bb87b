package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
)

// adversarialOverrides are sets of wildcard overrides that none of the
// identifiers of adversarialIdentifier match, each built to defeat one way
// of finding the matching override:
//
//   - suffix: the shape reported against the linear scan with a
//     backtracking glob ("*" + 250×"a" + "b00001" against 512 "a"): every
//     pattern starts with "*", so an index by prefix alone tries them all;
//   - prefix: the mirror image, so an index by suffix alone tries them all;
//   - infix: "*" + 250×"a" + "b00001" + "*", so prefix and suffix are both
//     empty and every pattern is a candidate of an index by prefix and suffix;
//   - ends: "a*" + 250×"a" + "b00001" + "*a", whose literal prefix and
//     suffix both fit the identifier;
//   - pairs: i×"a" + "*b*" + j×"a" for i, j from 1 to 100: 10,000
//     distinct pairs of prefix and suffix, each of which the identifier has;
//   - runs: "a*" + k×"a" + "b" + j×"a" + "*a" against an identifier of
//     256 "a", "b", 255 "a": prefix, suffix and every byte and byte pair
//     of the middle occur in the identifier, yet the middle does not
//     (k ≥ 256), so only the run itself tells;
//   - order: "*" + i×"a" + "c*b" + j×"a" + "*" against "b" + 510×"a" + "c":
//     every piece of every pattern occurs in the identifier, but in the
//     wrong order, so each pattern is a candidate whose runs are placed;
//   - most: the same with as many runs as MaxWildcards allows ("*" +
//     5×"a*" before them, 7 runs in all), the costliest shape we know.
var adversarialOverrides = map[string]func(i int) string{
	"suffix": func(i int) string { return "*" + strings.Repeat("a", 250) + fmt.Sprintf("b%05d", i) },
	"prefix": func(i int) string { return strings.Repeat("a", 250) + fmt.Sprintf("b%05d", i) + "*" },
	"infix":  func(i int) string { return "*" + strings.Repeat("a", 250) + fmt.Sprintf("b%05d", i) + "*" },
	"ends":   func(i int) string { return "a*" + strings.Repeat("a", 250) + fmt.Sprintf("b%05d", i) + "*a" },
	"pairs": func(i int) string {
		return strings.Repeat("a", 1+i/100) + "*b*" + strings.Repeat("a", 1+i%100)
	},
	"runs": func(i int) string {
		return "a*" + strings.Repeat("a", 256+i%200) + "b" + strings.Repeat("a", 1+i/200) + "*a"
	},
	"order": func(i int) string {
		return "*" + strings.Repeat("a", 1+i/100) + "c*b" + strings.Repeat("a", 1+i%100) + "*"
	},
	"most": func(i int) string {
		return "*" + strings.Repeat("a*", MaxWildcards-3) + strings.Repeat("a", 1+i/100) + "c*b" + strings.Repeat("a", 1+i%100) + "*"
	},
}

// adversarialIdentifier is the identifier each set of adversarialOverrides
// is sent with: 512 bytes, the longest the API accepts.
func adversarialIdentifier(shape string) string {
	switch shape {
	case "runs":
		return strings.Repeat("a", 256) + "b" + strings.Repeat("a", 255)
	case "order", "most":
		return "b" + strings.Repeat("a", 510) + "c"
	}
	return strings.Repeat("a", 512)
}

// serverWithOverrides returns the handler of a server whose namespace "api"
// (workspace OpenWorkspace) holds n overrides of the given shape, written
// straight to the store before the cache first reads it.
func serverWithOverrides(tb testing.TB, shape string, n int) http.Handler {
	tb.Helper()
	ctx := context.Background()
	st := newMemStore()
	ns, err := st.EnsureNamespace(ctx, OpenWorkspace, "api")
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		o := store.Override{Workspace: OpenWorkspace, NamespaceID: ns.ID, Identifier: adversarialOverrides[shape](i), Limit: 1, Duration: time.Minute}
		if _, err := st.SetOverride(ctx, o); err != nil {
			tb.Fatal(err)
		}
	}
	return newServerOver(tb, st, Config{}).Handler()
}

// limitLatencies sends calls limit calls for identifier through h and
// returns each call's duration, sorted.
func limitLatencies(tb testing.TB, h http.Handler, identifier string, calls int) []time.Duration {
	tb.Helper()
	body := `{"namespace":"api","identifier":"` + identifier + `","limit":1000000000,"duration":60000}`
	rd := strings.NewReader(body)
	req := httptest.NewRequest(http.MethodPost, "/v2/ratelimit.limit", rd)
	req.Header.Set("Authorization", "Bearer x")
	req.Header.Set("Content-Type", "application/json")
	w := &reusedWriter{header: http.Header{}}
	out := make([]time.Duration, 0, calls)
	for range calls {
		rd.Reset(body)
		w.reset()
		start := time.Now()
		h.ServeHTTP(w, req)
		out = append(out, time.Since(start))
		if w.code != http.StatusOK {
			tb.Fatalf("status %d", w.code)
		}
	}
	slices.Sort(out)
	return out
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// BenchmarkLimitAdversarialOverrides measures a /v2/ratelimit.limit call
// through the server's handler, in process, in a namespace without
// overrides and in one holding 10,000 wildcard overrides of each
// adversarial shape, none of which matches; besides ns/op it reports the
// p50 and p99 of single calls.
//
//	go test -run '^$' -bench LimitAdversarialOverrides -benchtime 5000x ./server
func BenchmarkLimitAdversarialOverrides(b *testing.B) {
	shapes := []string{"none", "suffix", "prefix", "infix", "ends", "pairs", "runs", "order", "most"}
	for _, shape := range shapes {
		b.Run(shape, func(b *testing.B) {
			n, id := 10_000, adversarialIdentifier(shape)
			if shape == "none" {
				n = 0
			}
			h := serverWithOverrides(b, shape, n)
			limitLatencies(b, h, id, 100) // warm
			b.ResetTimer()
			lat := limitLatencies(b, h, id, b.N)
			b.ReportMetric(float64(quantile(lat, 0.5).Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(quantile(lat, 0.99).Nanoseconds()), "p99-ns")
		})
	}
}
