package e2e

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"syscall"
	"time"
)

// chaosFault is one fault of a phase: start applies it and returns what
// heals it. heal reports false when it cannot heal yet (a stopped node
// has not exited): it is tried again, and the rest of its lane waits.
type chaosFault struct {
	lane, what string
	start      func() (heal func() bool)
	heal       func() bool // set when it starts
	started    time.Duration
}

// faultEvent is one step of a phase's timeline: a fault starts or heals at
// an offset from the phase's beginning.
type faultEvent struct {
	at    time.Duration
	fault *chaosFault
	heals bool
}

// faultKind is a fault a lane may draw, with the range of its length.
type faultKind struct {
	what     string
	min, max time.Duration
	start    func(rng *rand.Rand) func() (heal func() bool)
}

// planFaults draws the timeline of p's faults with rng: region a's Redis
// lane (latency, resets, SIGSTOP in a mixed phase; one SIGKILL in a kill
// phase, after which load moves to its second namespace) and the MariaDB
// lane (cut, latency, resets, a node restarted). Each lane runs one fault
// at a time with gaps of 1-4 s, and every fault heals at least 1.5 s
// before the load ends.
func (r *chaosRig) planFaults(p phaseSpec, rng *rand.Rand, load *chaosLoad) []faultEvent {
	run := p.run()
	var events []faultEvent
	redisKinds := r.redisFaults()
	if p.kind == phaseKill {
		at := run/4 + time.Duration(rng.Int64N(int64(run*3/10)))
		down := time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
		f := &chaosFault{lane: "redis-a", what: fmt.Sprintf("SIGKILL, restarted empty after %v", down.Round(time.Millisecond)),
			start: func() func() bool { return r.killRedis(load.next) }}
		events = append(events, faultEvent{at: at, fault: f}, faultEvent{at: at + down, fault: f, heals: true})
		redisKinds = nil
	}
	events = append(events, lane(rng, "redis-a", redisKinds, run)...)
	events = append(events, lane(rng, "mariadb", r.mysqlFaults(), run)...)
	slices.SortStableFunc(events, func(a, b faultEvent) int { return int(a.at - b.at) })
	return events
}

// lane draws faults of kinds one after another over run.
func lane(rng *rand.Rand, name string, kinds []faultKind, run time.Duration) []faultEvent {
	if len(kinds) == 0 {
		return nil
	}
	var events []faultEvent
	end := run - 1500*time.Millisecond
	for at := gap(rng); at < end-200*time.Millisecond; at += gap(rng) {
		k := kinds[rng.IntN(len(kinds))]
		length := k.min + time.Duration(rng.Int64N(int64(k.max-k.min)))
		heal := min(at+length, end)
		f := &chaosFault{lane: name, what: fmt.Sprintf("%s for %v", k.what, (heal - at).Round(time.Millisecond)), start: k.start(rng)}
		events = append(events, faultEvent{at: at, fault: f}, faultEvent{at: heal, fault: f, heals: true})
		at = heal
	}
	return events
}

// gap is a random pause of 1-4 s between two faults of a lane.
func gap(rng *rand.Rand) time.Duration {
	return time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
}

// always turns a fault's start into one whose heal is always ready.
func always(start func() (heal func())) func(*rand.Rand) func() func() bool {
	return func(*rand.Rand) func() func() bool {
		return func() func() bool {
			heal := start()
			return func() bool { heal(); return true }
		}
	}
}

// redisFaults are the faults of region a's Redis in a mixed phase.
func (r *chaosRig) redisFaults() []faultKind {
	return []faultKind{
		{"latency 60ms", time.Second, 4 * time.Second, always(func() func() { return r.redisProxy.Latency(60 * time.Millisecond) })},
		{"connection resets", 200 * time.Millisecond, time.Second, always(r.redisProxy.ResetPeer)},
		{"SIGSTOP", 500 * time.Millisecond, 3 * time.Second, always(func() func() {
			r.redisA.Signal(syscall.SIGSTOP)
			return func() { r.redisA.Signal(syscall.SIGCONT) }
		})},
	}
}

// mysqlFaults are the faults of the MariaDB lane. A node restart is on
// this lane because a node cannot start while its store is cut off.
func (r *chaosRig) mysqlFaults() []faultKind {
	return []faultKind{
		{"cut", time.Second, 5 * time.Second, always(func() func() { r.mysqlProxy.Down(); return r.mysqlProxy.Up })},
		{"latency 300ms", time.Second, 4 * time.Second, always(func() func() { return r.mysqlProxy.Latency(300 * time.Millisecond) })},
		{"connection resets", 200 * time.Millisecond, time.Second, always(r.mysqlProxy.ResetPeer)},
		{"node restart, down", 300 * time.Millisecond, 2 * time.Second, func(rng *rand.Rand) func() func() bool {
			names := []string{"a1", "a2", "a3", "b1", "b2"}
			name := names[rng.IntN(len(names))]
			return func() func() bool { return r.restart(name) }
		}},
	}
}

// killRedis kills region a's Redis (SIGKILL: what it held is lost) and
// returns what starts it again, empty, on the same port, and then calls
// back.
func (r *chaosRig) killRedis(back func()) func() bool {
	r.redisA.Stop()
	return func() bool { r.redisA.Start(); back(); return true }
}

// runFaults runs the timeline from begin, on the test's goroutine, and
// logs each step at the offset it ran. A heal that is not ready is tried
// again 50 ms later, and every later step of its lane moves with it, so a
// lane never starts a fault before the previous one healed.
func (r *chaosRig) runFaults(begin time.Time, events []faultEvent) {
	delay := map[string]time.Duration{}
	due := func(e faultEvent) time.Duration { return e.at + delay[e.fault.lane] }
	for len(events) > 0 {
		next := 0
		for i, e := range events {
			if due(e) < due(events[next]) {
				next = i
			}
		}
		e := events[next]
		time.Sleep(time.Until(begin.Add(due(e))))
		at := time.Since(begin)
		switch {
		case !e.heals:
			r.t.Logf("  %7v %s: %s", at.Round(10*time.Millisecond), e.fault.lane, e.fault.what)
			e.fault.started = at
			e.fault.heal = e.fault.start()
		case !e.fault.heal():
			delay[e.fault.lane] += 50 * time.Millisecond
			continue
		default:
			r.t.Logf("  %7v %s: healed %s (after %v)", at.Round(10*time.Millisecond), e.fault.lane, e.fault.what,
				(at - e.fault.started).Round(10*time.Millisecond))
		}
		events = slices.Delete(events, next, next+1)
	}
}

// restart drains the node called name from the load and stops it, off
// the test's goroutine (a stop may take FlushTimeout while Redis is down,
// and the other lane goes on meanwhile), and returns its heal: once the
// node has exited, start it again. See stopDrained.
func (r *chaosRig) restart(name string) func() bool {
	t := r.t
	n := r.lb.byName(name)
	if n == nil {
		t.Fatalf("node %s is not up", name)
	}
	r.lb.drain(n)
	stopped := make(chan stopResult, 1)
	go func() { stopped <- stopDrained(n) }()
	return func() bool {
		var res stopResult
		select {
		case res = <-stopped:
		default:
			return false
		}
		t.Logf("          %s: drained in %v, stopped in %v after SIGTERM", name, res.drain.Round(time.Millisecond), res.stop.Round(time.Millisecond))
		if res.err != nil {
			t.Errorf("restarting node %s: %v", name, res.err)
		}
		r.retired = append(r.retired, res.retired)
		r.lb.add(&chaosNode{node: start(t, nil, n.args...), name: n.name, region: n.region, args: n.args})
		return true
	}
}

// stopResult is how a drained node stopped.
type stopResult struct {
	retired     retiredNode
	drain, stop time.Duration
	err         error
}

// stopDrained waits for the requests in flight on a drained node n, on the
// client (15 s at most) and on the server, scrapes it, and stops it with
// SIGTERM. A node that does not exit within 20 s is an error: a hang. It
// calls nothing that fails the test, as it runs off the test's goroutine.
func stopDrained(n *chaosNode) (res stopResult) {
	begin := time.Now()
	res.retired.region = n.region
	done := make(chan struct{})
	go func() { n.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		res.err = fmt.Errorf("requests in flight on %s did not end within 15 s", n.name)
	}
	for deadline := time.Now().Add(10 * time.Second); res.err == nil; time.Sleep(20 * time.Millisecond) {
		m, err := scrape(n.Admin)
		switch {
		case err == nil && sampleSum(m, "sluice_http_requests_in_flight") == 0:
			res.retired.metrics = m
		case time.Now().After(deadline):
			res.err = fmt.Errorf("the server's requests in flight did not end within 10 s: %w", err)
		default:
			continue
		}
		break
	}
	logged := len(n.logs())
	res.drain = time.Since(begin)
	if err := n.stop(20 * time.Second); err != nil && res.err == nil {
		res.err = fmt.Errorf("after SIGTERM: %w\n%s", err, n.logs()[logged:])
	}
	res.stop = time.Since(begin) - res.drain
	res.retired.lateDrops = logDrops(n.logs()[logged:])
	return res
}

// scrape returns the metrics of the admin listener at admin.
func scrape(admin string) (string, error) {
	res, err := client.Get(admin + "/metrics")
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err == nil && res.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET /metrics: %d", res.StatusCode)
	}
	return string(b), err
}
