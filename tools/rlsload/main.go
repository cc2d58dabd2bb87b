// Command rlsload sends Envoy RLS ShouldRateLimit calls over gRPC (grpc-go)
// to a server and reports the calls per second and, with -pid, the server
// process's CPU per call (from /proc/PID/stat, user + system).
//
//	go run ./tools/rlsload -addr 127.0.0.1:8081 -d 8s -descriptors 3 -pid 1234
//
// Built with -tags gzip, the client links grpc-go's gzip codec and so
// offers gzip (grpc-accept-encoding) on every call, as a grpc-go client
// with that codec linked does. Every call carries -descriptors descriptors
// of the domain -domain, keyed -key, over -ids distinct values; -c calls
// are in flight at once over -conns connections.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the RLS server (h2c)")
	domain := flag.String("domain", "edge", "domain of every call")
	key := flag.String("key", "remote_address", "descriptor key")
	descriptors := flag.Int("descriptors", 1, "descriptors per call (keys key, key2, key3, …)")
	ids := flag.Int("ids", 1000, "distinct descriptor values")
	inflight := flag.Int("c", 32, "calls in flight")
	conns := flag.Int("conns", 4, "connections")
	dur := flag.Duration("d", 8*time.Second, "duration")
	pid := flag.Int("pid", 0, "server process whose CPU per call to report (0: none)")
	flag.Parse()

	clients := make([]rlsv3.RateLimitServiceClient, *conns)
	for i := range clients {
		cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			log.Fatal(err)
		}
		defer cc.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	reqs := requests(*domain, *key, *descriptors, *ids)
	cpu0 := cpuTicks(*pid)
	calls, failures := run(clients, reqs, *inflight, *dur)
	cpu := cpuTicks(*pid) - cpu0
	line := fmt.Sprintf("calls/s %.0f  failures %d", float64(calls)/dur.Seconds(), failures)
	if *pid != 0 && calls > 0 {
		line += fmt.Sprintf("  server CPU µs/call %.1f", float64(cpu)*1e6/100/float64(calls))
	}
	fmt.Println(line)
}

// requests returns one request per descriptor value.
func requests(domain, key string, descriptors, ids int) []*rlsv3.RateLimitRequest {
	out := make([]*rlsv3.RateLimitRequest, ids)
	for i := range out {
		r := &rlsv3.RateLimitRequest{Domain: domain}
		for d := range descriptors {
			k := key
			if d > 0 {
				k += strconv.Itoa(d + 1)
			}
			r.Descriptors = append(r.Descriptors, &ratelimitv3.RateLimitDescriptor{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)}},
			})
		}
		out[i] = r
	}
	return out
}

// run keeps inflight calls going for dur and returns the calls answered
// and the calls that failed.
func run(clients []rlsv3.RateLimitServiceClient, reqs []*rlsv3.RateLimitRequest, inflight int, dur time.Duration) (calls, failures int64) {
	var ok, failed atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var wg sync.WaitGroup
	for w := range inflight {
		wg.Go(func() {
			client := clients[w%len(clients)]
			for i := w; ctx.Err() == nil; i += inflight {
				if _, err := client.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
					failed.Add(1)
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return ok.Load(), failed.Load()
}

// cpuTicks returns the user + system clock ticks (1/100 s) of process pid
// so far, or 0 for pid 0.
func cpuTicks(pid int) int64 {
	if pid == 0 {
		return 0
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		log.Fatal(err)
	}
	// The fields after the command (in parentheses): utime is the 12th,
	// stime the 13th.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}
