// Command load drives a Sluice (or Unkey-compatible) server's
// /v2/ratelimit.limit endpoint with concurrent keep-alive clients for a
// fixed time and prints throughput, latency percentiles and outcomes.
//
//	go run . -url http://127.0.0.1:7070 -key k -c 32 -d 10s -ids 1000
//
// It lives in its own module so that a heavier generator's dependencies
// never reach the main module; this one uses only the standard library.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:7070", "server base URL")
	key := flag.String("key", "load", "root key")
	conc := flag.Int("c", 16, "concurrent clients")
	dur := flag.Duration("d", 10*time.Second, "test duration")
	ids := flag.Int("ids", 1000, "distinct identifiers (requests cycle over them)")
	limit := flag.Int64("limit", 100, "limit per identifier")
	window := flag.Int64("window", 60000, "window duration in ms")
	flag.Parse()
	if err := run(*url, *key, *conc, *dur, *ids, *limit, *window); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

type stats struct {
	lat            []time.Duration
	passed, denied int
	errors, non200 int
	firstErr       string
}

func run(url, key string, conc int, dur time.Duration, ids int, limit, window int64) error {
	if conc < 1 || ids < 1 || dur <= 0 {
		return fmt.Errorf("-c, -ids and -d must be positive")
	}
	tr := &http.Transport{MaxIdleConns: conc, MaxIdleConnsPerHost: conc}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	results := make([]stats, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			s := &results[w]
			for i := w; ctx.Err() == nil; i += conc {
				body := fmt.Appendf(nil, `{"namespace":"load","identifier":"id-%d","limit":%d,"duration":%d}`, i%ids, limit, window)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v2/ratelimit.limit", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				res, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						s.errors++
						if s.firstErr == "" {
							s.firstErr = err.Error()
						}
					}
					continue
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				s.lat = append(s.lat, time.Since(t0))
				switch {
				case res.StatusCode != http.StatusOK:
					s.non200++
					if s.firstErr == "" {
						s.firstErr = fmt.Sprintf("%d: %s", res.StatusCode, b)
					}
				case bytes.Contains(b, []byte(`"success":true`)):
					s.passed++
				default:
					s.denied++
				}
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all stats
	for _, s := range results {
		all.lat = append(all.lat, s.lat...)
		all.passed += s.passed
		all.denied += s.denied
		all.errors += s.errors
		all.non200 += s.non200
		if all.firstErr == "" {
			all.firstErr = s.firstErr
		}
	}
	slices.Sort(all.lat)
	pct := func(p float64) time.Duration {
		if len(all.lat) == 0 {
			return 0
		}
		return all.lat[min(len(all.lat)-1, int(p*float64(len(all.lat))))]
	}
	fmt.Printf("requests %d in %v: %.0f req/s (c=%d, ids=%d)\n", len(all.lat), elapsed.Round(time.Millisecond), float64(len(all.lat))/elapsed.Seconds(), conc, ids)
	fmt.Printf("latency p50 %v  p90 %v  p99 %v  max %v\n", pct(.5), pct(.9), pct(.99), pct(1))
	fmt.Printf("passed %d  denied %d  non-200 %d  transport errors %d\n", all.passed, all.denied, all.non200, all.errors)
	if all.firstErr != "" {
		fmt.Printf("first error: %s\n", all.firstErr)
	}
	if all.non200 > 0 || all.errors > 0 {
		return fmt.Errorf("%d non-200 responses, %d transport errors", all.non200, all.errors)
	}
	return nil
}
