// Command rlsload sends rate-limit calls over gRPC (grpc-go) to a server
// and reports the calls per second, the share of calls that passed and,
// with -pid, the server process's CPU per call (from /proc/PID/stat, user
// + system); with -redis-pid, that of a Redis server too.
//
//	go run ./tools/rlsload -addr 127.0.0.1:8081 -d 8s -descriptors 3 -pid 1234
//
// With -proto rls (the default) every call is an Envoy RLS ShouldRateLimit
// carrying -descriptors descriptors of the domain -domain, keyed -key
// (key, key2, key3, …), over -ids distinct values. With -proto gubernator
// every call is gubernator's native GetRateLimits (pb.gubernator.V1) with
// one request per descriptor: name the descriptor's key, unique key
// -domain_value, hits 1, and the limit -limit per -window (token bucket,
// gubernator's default), gubernator's counterpart of the RLS rule. A call
// passes when every descriptor is under its limit.
//
// Built with -tags gzip, the client links grpc-go's gzip codec and so
// offers gzip (grpc-accept-encoding) on every call, as a grpc-go client
// with that codec linked does. -c calls are in flight at once over -conns
// connections.
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

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// caller makes the i-th call of worker w and reports whether it passed.
type caller func(w, i int) (bool, error)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the server (h2c)")
	proto := flag.String("proto", "rls", "rls (Envoy ShouldRateLimit) or gubernator (GetRateLimits)")
	domain := flag.String("domain", "edge", "domain of every call")
	key := flag.String("key", "remote_address", "descriptor key")
	descriptors := flag.Int("descriptors", 1, "descriptors per call (keys key, key2, key3, …)")
	ids := flag.Int("ids", 1000, "distinct descriptor values")
	limit := flag.Int64("limit", 1_000_000_000, "gubernator: the limit of every request")
	window := flag.Duration("window", time.Second, "gubernator: the duration of every request's limit")
	inflight := flag.Int("c", 32, "calls in flight")
	conns := flag.Int("conns", 4, "connections")
	dur := flag.Duration("d", 8*time.Second, "duration")
	pid := flag.Int("pid", 0, "server process whose CPU per call to report (0: none)")
	redisPid := flag.Int("redis-pid", 0, "Redis process whose CPU per call to report (0: none)")
	flag.Parse()
	if *proto != "rls" && *proto != "gubernator" {
		log.Fatalf("-proto %q: want rls or gubernator", *proto)
	}

	ccs := make([]*grpc.ClientConn, *conns)
	for i := range ccs {
		cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			log.Fatal(err)
		}
		defer cc.Close()
		ccs[i] = cc
	}
	var call caller
	switch *proto {
	case "rls":
		call = rlsCaller(ccs, *domain, *key, *descriptors, *ids)
	default: // gubernator: the flag was checked above
		call = gubernatorCaller(ccs, *domain, *key, *descriptors, *ids, *limit, *window)
	}
	cpu0, redis0 := cpuTicks(*pid), cpuTicks(*redisPid)
	calls, passed, failures := run(call, *inflight, *dur)
	cpu, redis := cpuTicks(*pid)-cpu0, cpuTicks(*redisPid)-redis0
	line := fmt.Sprintf("calls/s %.0f  failures %d", float64(calls)/dur.Seconds(), failures)
	if calls > 0 {
		line += fmt.Sprintf("  passed %.1f%%", 100*float64(passed)/float64(calls))
	}
	if *pid != 0 && calls > 0 {
		line += fmt.Sprintf("  server CPU µs/call %.1f", float64(cpu)*1e6/100/float64(calls))
	}
	if *redisPid != 0 && calls > 0 {
		line += fmt.Sprintf("  redis CPU µs/call %.1f", float64(redis)*1e6/100/float64(calls))
	}
	fmt.Println(line)
}

// value is the descriptor value of the i-th of the distinct values.
func value(i int) string {
	return "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
}

// keyOf is the key of the d-th descriptor of a call (0-based).
func keyOf(key string, d int) string {
	if d == 0 {
		return key
	}
	return key + strconv.Itoa(d+1)
}

// run keeps inflight calls going for dur and returns the calls answered,
// those that passed and the calls that failed.
func run(call caller, inflight int, dur time.Duration) (calls, passed, failures int64) {
	var ok, pass, failed atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var wg sync.WaitGroup
	for w := range inflight {
		wg.Go(func() {
			for i := w; ctx.Err() == nil; i += inflight {
				p, err := call(w, i)
				if err != nil {
					if failed.Add(1) == 1 {
						log.Printf("first failure: %v", err)
					}
					continue
				}
				ok.Add(1)
				if p {
					pass.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return ok.Load(), pass.Load(), failed.Load()
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
