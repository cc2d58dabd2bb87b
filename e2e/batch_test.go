package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestBatchesAcrossNodesOverHTTP runs two `sluice serve` on one Redis,
// with the default settings, racing for the last 3 units of 4 counters
// (limit 20 per hour, 17 spent first, decided at the origin): multiLimit
// calls of 2 or 3 of them (cost 1), each sent to a node picked at random,
// from one sender and from 32 at once. No counter may be spent past its
// limit.
func TestBatchesAcrossNodesOverHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("two processes")
	}
	url := "redis://" + testenv.RedisAddr(t) + "/0"
	ws := fmt.Sprintf("e2e-batches-%d", time.Now().UnixNano())
	nodes := []*node{
		start(t, nil, "--redis-url", url, "--root-key", rk+":"+ws),
		start(t, nil, "--redis-url", url, "--root-key", rk+":"+ws),
	}
	for _, tc := range []struct {
		name             string
		senders, batches int
	}{
		{"one sender", 1, 40},
		{"32 senders", 32, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := fmt.Sprintf("batches-%d", tc.senders)
			admitted := raceBatchesOverHTTP(t, nodes, ns, tc.senders, tc.batches)
			t.Logf("admitted per counter: %v (limit 20)", admitted)
			for c, n := range admitted {
				if n > 20 {
					t.Errorf("counter %d: %d admitted on a limit of 20", c, n)
				}
			}
		})
	}
}

// raceBatchesOverHTTP spends 17 units of each of 4 counters (limit 20 per
// hour) on the first node, then sends multiLimit calls of 2 or 3 of them to
// random nodes, and returns what each counter admitted.
func raceBatchesOverHTTP(t *testing.T, nodes []*node, ns string, senders, batches int) [4]int {
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	var (
		mu       sync.Mutex
		admitted [4]int
		wg       sync.WaitGroup
	)
	for c := range admitted {
		body := strings.Replace(limitJSON(ns, fmt.Sprint("counter-", c), 20, time.Hour), "}", `,"cost":17}`, 1)
		if passed, err := postLimit(hc, nodes[0].URL+"/v2/ratelimit.limit", body, "success"); err != nil || !passed {
			t.Fatalf("priming counter %d: %v, %v", c, passed, err)
		}
		admitted[c] = 17
	}
	for s := range senders {
		rng := rand.New(rand.NewPCG(uint64(s), 7))
		wg.Go(func() {
			for range batches {
				picked := rng.Perm(4)[:2+rng.IntN(2)]
				checks := make([]string, len(picked))
				for i, c := range picked {
					checks[i] = limitJSON(ns, fmt.Sprint("counter-", c), 20, time.Hour)
				}
				n := nodes[rng.IntN(len(nodes))]
				passed, err := postLimit(hc, n.URL+"/v2/ratelimit.multiLimit", "["+strings.Join(checks, ",")+"]", "passed")
				if err != nil {
					t.Errorf("multiLimit: %v", err)
					return
				}
				if passed {
					mu.Lock()
					for _, c := range picked {
						admitted[c]++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return admitted
}
