package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestCallersThatGiveUpOverHTTP is the reviewer's run of one `sluice
// serve` with Redis 30 ms away: 20 identifiers, limit 20 per hour, 40
// requests each from 40 senders at once, half of them with a client
// timeout of 5–100 ms that drops the connection. The node is the only
// writer of its region, so once it has stopped (flushing), Redis must hold
// exactly 20 of each identifier: what its limit allows, whatever the
// callers did. Before callers that gave up decided beside the origin's
// call in flight, Redis held 406–407 of 400 in this test (the reviewer
// measured 411–416).
func TestCallersThatGiveUpOverHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("a process with Redis 30 ms away")
	}
	proxy := testenv.NewProxy(t, testenv.RedisAddr(t))
	defer proxy.Latency(30 * time.Millisecond)()
	ws := fmt.Sprintf("e2e-giveup-%d", time.Now().UnixNano())
	common := []string{"--redis-url", "redis://" + proxy.Addr() + "/0", "--root-key", rk + ":" + ws}
	n := start(t, nil, common...)
	const ids, limit, each = 20, 20, 40
	var jobs []string
	for id := range ids {
		for range each {
			jobs = append(jobs, fmt.Sprint("user-", id))
		}
	}
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	queue := make(chan int, len(jobs))
	for i := range jobs {
		queue <- i
	}
	close(queue)
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			for i := range queue {
				hc := &http.Client{Timeout: 10 * time.Second}
				if i%2 == 0 {
					hc.Timeout = time.Duration(5+rand.IntN(96)) * time.Millisecond // gives up
				}
				_, _ = limitOverHTTP(hc, n.URL, "giveup", jobs[i], limit, time.Hour)
				hc.CloseIdleConnections()
			}
		})
	}
	wg.Wait()
	if err := n.stop(15 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, n.logs())
	}
	reader := start(t, nil, common...)
	total := 0
	for id := range ids {
		held := heldOverHTTP(t, reader.URL, "giveup", fmt.Sprint("user-", id))
		total += held
		if held != limit {
			t.Errorf("user-%d: Redis holds %d on a limit of %d", id, held, limit)
		}
	}
	t.Logf("Redis holds %d for %d identifiers of limit %d, half of %d requests given up after 5-100 ms", total, ids, limit, len(jobs))
}

// heldOverHTTP returns the count of identifier in its one-hour window, as
// a peek with a limit no count reaches sees it.
func heldOverHTTP(t *testing.T, url, namespace, identifier string) int {
	t.Helper()
	const big = 1 << 30
	body := strings.Replace(limitJSON(namespace, identifier, big, time.Hour), "}", `,"cost":0}`, 1)
	r := <-post(t, url+"/v2/ratelimit.limit", rk, body)
	if r.err != nil || r.code != http.StatusOK {
		t.Fatalf("peek: %d %s %v", r.code, r.body, r.err)
	}
	var out struct {
		Data struct {
			Remaining int `json:"remaining"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(r.body), &out); err != nil {
		t.Fatal(err)
	}
	return big - out.Data.Remaining
}
