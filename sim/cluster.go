package sim

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/origin/cluster"
)

// A region in cluster mode runs the real cluster origin on every node. Its
// peer RPC (signed JSON over HTTP) crosses a peerNet, an in-process network
// with no socket, so that a run stays deterministic and fast; membership is
// modelled: the simulator sets every live node's peers when a node is lost
// (after the failure detection delay) or joins, in place of memberlist, and
// drives re-homing (Origin.Rehome) itself. Exceed broadcasts, which only
// save RPCs, are not modelled.

// errRefused is a peerNet's answer to a call for a host that is down.
var errRefused = errors.New("sim: connection refused")

// peerNet is the in-process network of one region's cluster: a request
// goes straight to the handler of the host its URL names.
type peerNet struct {
	mu    sync.Mutex
	hosts map[string]http.Handler
}

func newPeerNet() *peerNet { return &peerNet{hosts: map[string]http.Handler{}} }

// RoundTrip implements [http.RoundTripper]: it serves req with the handler
// of its host, or fails with errRefused if that host is down.
func (p *peerNet) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	p.mu.Lock()
	h := p.hosts[req.URL.Host]
	p.mu.Unlock()
	if h == nil {
		return nil, fmt.Errorf("%w: %s", errRefused, req.URL.Host)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

func (p *peerNet) up(host string, h http.Handler) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hosts[host] = h
}

func (p *peerNet) down(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.hosts, host)
}

// rpcCounter counts a node's peer RPCs.
type rpcCounter struct {
	cluster.NopObserver
	n *atomic.Int64
}

// RPC implements [cluster.Observer].
func (c rpcCounter) RPC(cluster.Kind, cluster.Outcome, time.Duration) { c.n.Add(1) }

// clusterRegion is what the nodes of one region in cluster mode share.
type clusterRegion struct {
	net   *peerNet
	clock *vclock
	never <-chan time.Time
	rpcs  *atomic.Int64
}

// host is the peer network's name for the node's current incarnation: a
// node that joins again is a new process at a new address.
func (n *node) host() string { return fmt.Sprintf("%s.%d", n.id, n.gen) }

// startCluster starts a cluster origin for the node's current incarnation
// and puts it on the region's network, alone on its ring until
// setMembers.
func (n *node) startCluster() (*cluster.Origin, error) {
	c := n.cluster
	co, err := cluster.New(cluster.Config{
		ID:      n.id,
		Secret:  "sim",
		Timeout: time.Minute, // in-process calls answer at once; no wall-clock deadline may decide
		Client:  &http.Client{Transport: c.net},
		// An open breaker never half-opens during a run (its timer reads
		// the wall clock): the lost node leaves the ring instead.
		Breaker:     cluster.BreakerConfig{OpenTimeout: 1000 * time.Hour},
		Logger:      slog.New(slog.DiscardHandler),
		Observer:    rpcCounter{n: c.rpcs},
		Clock:       c.clock.now,
		RehomeTicks: c.never,
	})
	if err != nil {
		return nil, err
	}
	_, h := co.Handler()
	c.net.up(n.host(), h)
	return co, nil
}

// setMembers makes the live nodes of a region in cluster mode members of
// one ring, then has each hand the cells that moved to their new owners,
// in node order.
func setMembers(region []*node) {
	addrs := map[string]cluster.Member{}
	for _, n := range region {
		if n.alive && n.co != nil {
			addrs[n.id] = cluster.Member{RPC: "http://" + n.host(), Incarnation: n.co.Incarnation()}
		}
	}
	for _, n := range region {
		if n.alive && n.co != nil {
			n.co.SetPeers(addrs)
		}
	}
	rehome(region)
}

// rehome runs a re-homing pass on every live node of a region in cluster
// mode: after a ring change, or a breaker that opened, it seeds the new
// owners; otherwise it sends the deltas parked for an unreachable owner.
func rehome(region []*node) {
	for _, n := range region {
		if n.alive && n.co != nil {
			n.co.Rehome()
		}
	}
}
