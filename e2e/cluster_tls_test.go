package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestClusterOverTLS runs three cluster nodes whose API ports, and so their
// peer RPC, serve mutual TLS (each node's certificate serves and
// authenticates it to its peers). A counter spent on one node is denied on the
// others, whose reads and decisions at its owner travel over TLS: the RPC
// counters move, and no call fails.
func TestClusterOverTLS(t *testing.T) {
	p := newPKI(t)
	// Under mutual TLS a node presents its own certificate to its peers:
	// it must allow client authentication as well as serving.
	p.certFile, p.keyFile = p.ca.Peer(t, "node").Files(t, p.dir, "node")
	apiClient := p.ca.Client(t, "api client").TLS(t)
	ws := fmt.Sprintf("e2e-cluster-tls-%d", time.Now().UnixNano())
	ports := gossipPorts(t, 3)
	addrs := make([]string, len(ports))
	for i, port := range ports {
		addrs[i] = "127.0.0.1:" + strconv.Itoa(port)
	}
	nodes := make([]*clusterNode, len(addrs))
	for i, gossip := range addrs {
		others := make([]string, 0, len(addrs)-1)
		for _, a := range addrs {
			if a != gossip {
				others = append(others, a)
			}
		}
		n := start(t, nil, "--origin", "cluster", "--cluster-addr", gossip, "--cluster-join", strings.Join(others, ","),
			"--root-key", rk+":"+ws, "--admin-addr", "127.0.0.1:0",
			"--tls-cert", p.certFile, "--tls-key", p.keyFile, "--tls-client-ca", p.caFile)
		n.HTTP = p.httpClient(true, apiClient)
		nodes[i] = &clusterNode{node: n, gossip: gossip}
	}
	waitMembers(t, nodes, 3, 20*time.Second)

	rpcs := func(outcome string) (sum float64) {
		for _, n := range nodes {
			sum += metricValue(t, n, "sluice_cluster_rpcs_total", []string{`outcome="` + outcome + `"`})
		}
		return sum
	}
	okBefore := rpcs("ok")
	const limit = 5
	for id := range 12 {
		identifier := "user-" + strconv.Itoa(id)
		for i := range limit {
			if d := nodes[0].limit(rk, "tls", identifier, limit, window, 1); !d.Success {
				t.Fatalf("%s: unit %d of %d denied on the first node: %+v", identifier, i+1, limit, d)
			}
		}
	}
	defer func() { // what the peer RPC did, when the test failed
		if t.Failed() {
			for _, o := range []string{"ok", "error", "unavailable", "timeout", "rejected", "canceled"} {
				t.Logf("peer RPCs ended %q: %v", o, rpcs(o))
			}
		}
	}()
	waitFor(t, 5*time.Second, "the other nodes to deny what the first spent", func() bool {
		for id := range 12 {
			for _, n := range nodes[1:] {
				if n.limit(rk, "tls", "user-"+strconv.Itoa(id), limit, window, 0).Remaining != 0 {
					return false
				}
			}
		}
		return true
	})
	for id := range 12 {
		for _, n := range nodes[1:] {
			if d := n.limit(rk, "tls", "user-"+strconv.Itoa(id), limit, window, 1); d.Success {
				t.Fatalf("user-%d: a node admitted a unit past the limit spent on another: %+v", id, d)
			}
		}
	}
	if rpcs("ok") <= okBefore {
		t.Fatal("no peer RPC succeeded: the identities' owners were never asked over TLS")
	}
	for _, outcome := range []string{"error", "unavailable", "timeout", "rejected"} {
		if n := rpcs(outcome); n > 0 {
			t.Errorf("%v peer RPCs ended %q over TLS", n, outcome)
		}
	}
}
