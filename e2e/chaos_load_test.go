package e2e

import (
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// chaosNode is one node of the chaos rig, as its load balancer sees it.
type chaosNode struct {
	*node
	name, region string
	args         []string // to start it again
	drained      bool     // guarded by balancer.mu: gets no new requests
	inflight     sync.WaitGroup
}

// balancer spreads requests over the nodes of both regions at random, and
// drains a node before it is stopped, as a load balancer would.
type balancer struct {
	mu    sync.Mutex
	nodes []*chaosNode
}

func (b *balancer) add(n *chaosNode) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nodes = append(b.nodes, n)
}

// pick returns a node that is not drained, drawn with rng, with one more
// request in flight (the caller calls inflight.Done).
func (b *balancer) pick(rng *rand.Rand) *chaosNode {
	b.mu.Lock()
	defer b.mu.Unlock()
	live := make([]*chaosNode, 0, len(b.nodes))
	for _, n := range b.nodes {
		if !n.drained {
			live = append(live, n)
		}
	}
	n := live[rng.IntN(len(live))]
	n.inflight.Add(1)
	return n
}

// drain stops sending n requests and removes it; the caller waits for
// n.inflight.
func (b *balancer) drain(n *chaosNode) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n.drained = true
	b.nodes = slices.DeleteFunc(b.nodes, func(m *chaosNode) bool { return m == n })
}

// byName returns the node called name, or nil while it is down.
func (b *balancer) byName(name string) *chaosNode {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// all returns the nodes up.
func (b *balancer) all() []*chaosNode {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.nodes)
}

// idClass is a kind of identifier of the chaos load.
type idClass int

const (
	// patient identifiers send chaosPatientX × their limit; their clients
	// wait for every answer, so they know how many passed. They are
	// modelled.
	patient idClass = iota
	// over identifiers send twice their limit from clients that cancel
	// each request after 1-8 ms: near and over their limit, a caller that
	// gives up may leave the origin one admission ahead (the documented
	// over-count).
	over
	// near identifiers send 0.85 × their limit, in a namespace of their
	// own, from clients that cancel each request after 1-8 ms: within the
	// origin margin (20%) every decision is made at the origin, and none
	// is ever denied, so every admission the origin makes for a caller
	// that gave up is the one the caller then admits locally: the origin
	// must hold exactly what the nodes admitted.
	near
)

// perWindow is the requests per window of each class.
var perWindow = [...]int{patient: chaosPatientX * chaosLimit, over: 2 * chaosLimit, near: chaosLimit * 85 / 100}

// chaosJob is one request of a chaos load.
type chaosJob struct {
	id    string
	class idClass
	model int           // the identifier's counter in the model (patient only)
	due   time.Duration // after begin
}

// chaosSchedule returns the requests of a phase in time order: each
// identifier's requests evenly spaced at a phase of its own drawn with rng.
func chaosSchedule(rng *rand.Rand, run time.Duration) []chaosJob {
	var jobs []chaosJob
	add := func(id string, class idClass, model int) {
		gap := chaosWindow / time.Duration(perWindow[class])
		for at := time.Duration(rng.Int64N(int64(gap))); at < run; at += gap {
			jobs = append(jobs, chaosJob{id: id, class: class, model: model, due: at})
		}
	}
	for i := range chaosPatient {
		add(chaosPatientPrefix+strconv.Itoa(i), patient, i)
	}
	for i := range chaosImpatient {
		add("over-"+strconv.Itoa(i), over, -1)
		add("near-"+strconv.Itoa(i), near, -1)
	}
	slices.SortStableFunc(jobs, func(a, b chaosJob) int { return int(a.due - b.due) })
	return jobs
}

// regionNS is a region and a namespace.
type regionNS struct{ region, ns string }

// chaosNamespaces are the two namespaces of a chaos load: the patient and
// over identifiers' and the near identifiers'.
type chaosNamespaces struct{ main, near string }

func (n chaosNamespaces) of(c idClass) string {
	if c == near {
		return n.near
	}
	return n.main
}

// chaosOutcome is what a chaos load saw.
type chaosOutcome struct {
	requests int
	// patient holds the answered requests of the patient identifiers, in
	// time order; those sent to the phase's second namespaces have
	// chaosPatient added to their id (the model's counters differ).
	patient       []sent
	patientPassed map[regionNS]int // requests of patient identifiers that passed
	impatient     map[regionNS]int // answered requests of over and near identifiers
	cancels       map[regionNS]int // requests their client cancelled
	errors        int
	firstErrs     []string
	late          time.Duration // the most a request was sent behind schedule
}

// chaosLoad is an open-loop load: every request is sent on schedule from a
// goroutine of its own, so a slow answer delays no other request. It sends
// to its first namespaces until next is called, then to the second.
type chaosLoad struct {
	namespaces []chaosNamespaces
	second     atomic.Bool
	done       chan chaosOutcome
}

// startChaosLoad sends the schedule of seed from begin for run, each
// request to a node the balancer picks.
func startChaosLoad(lb *balancer, namespaces []chaosNamespaces, seed uint64, begin time.Time, run time.Duration) *chaosLoad {
	l := &chaosLoad{namespaces: namespaces, done: make(chan chaosOutcome, 1)}
	go l.run(lb, seed, begin, run)
	return l
}

// next sends the requests from now on to the second namespaces.
func (l *chaosLoad) next() { l.second.Store(true) }

func (l *chaosLoad) wait() chaosOutcome { return <-l.done }

func (l *chaosLoad) run(lb *balancer, seed uint64, begin time.Time, run time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 2))
	jobs := chaosSchedule(rng, run)
	tr := loadTransport(256)
	defer tr.CloseIdleConnections()
	waiting := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	out := chaosOutcome{requests: len(jobs), patientPassed: map[regionNS]int{}, impatient: map[regionNS]int{}, cancels: map[regionNS]int{}}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, j := range jobs {
		time.Sleep(time.Until(begin.Add(j.due)))
		out.late = max(out.late, time.Since(begin.Add(j.due)))
		n := lb.pick(rng)
		hc := waiting
		if j.class != patient {
			hc = &http.Client{Timeout: time.Millisecond + time.Duration(rng.Int64N(int64(7*time.Millisecond))), Transport: tr}
		}
		namespaces := l.namespaces[0]
		if l.second.Load() && len(l.namespaces) > 1 {
			namespaces = l.namespaces[1]
			j.model += chaosPatient
		}
		wg.Go(func() {
			defer n.inflight.Done()
			ns := namespaces.of(j.class)
			before := time.Now()
			passed, err := limitOverHTTP(hc, n.URL, ns, j.id, chaosLimit, chaosWindow)
			after := time.Now()
			mu.Lock()
			defer mu.Unlock()
			out.record(j, regionNS{n.region, ns}, n.name, passed, err, (before.UnixMilli()+after.UnixMilli())/2)
		})
	}
	wg.Wait()
	slices.SortStableFunc(out.patient, func(a, b sent) int { return int(a.at - b.at) })
	l.done <- out
}

// record adds one answer (or error) of node name to the outcome.
func (o *chaosOutcome) record(j chaosJob, where regionNS, name string, passed bool, err error, at int64) {
	var ne net.Error
	switch {
	case err != nil && j.class != patient && errors.As(err, &ne) && ne.Timeout():
		o.cancels[where]++
	case err != nil:
		o.errors++
		if len(o.firstErrs) < 5 {
			o.firstErrs = append(o.firstErrs, name+" "+where.ns+" "+j.id+": "+err.Error())
		}
	case j.class != patient:
		o.impatient[where]++
	default:
		o.patient = append(o.patient, sent{id: j.model, at: at, success: passed})
		if passed {
			o.patientPassed[where]++
		}
	}
}
