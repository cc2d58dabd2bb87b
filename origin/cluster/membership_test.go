package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// freePort returns a port free on 127.0.0.1-3 for TCP and UDP, below the
// ephemeral range (32768 and up on Linux), so that no outgoing connection
// takes it before the test binds it.
func freePort(t *testing.T) int {
	t.Helper()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		ok := true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		ln.Close()
		for i := 1; i <= 3; i++ {
			pc, err := net.ListenPacket("udp", net.JoinHostPort(fmt.Sprintf("127.0.0.%d", i), strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			pc.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// TestMembershipThroughDNS forms a 3-node cluster whose seed is one DNS
// name standing for the three nodes' addresses (a fake resolver), gossips an
// exceed to every node, and shrinks to two when one leaves.
func TestMembershipThroughDNS(t *testing.T) {
	port := freePort(t)
	resolver := func(_ context.Context, host string) ([]string, error) {
		if host != "sluice.test" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}, nil
	}
	var (
		origins []*Origin
		members []*Membership
		mergers []*recordingMerger
	)
	for i := 1; i <= 3; i++ {
		gossip := net.JoinHostPort(fmt.Sprintf("127.0.0.%d", i), strconv.Itoa(port))
		o, err := New(Config{ID: gossip, Secret: "s3cret"})
		if err != nil {
			t.Fatal(err)
		}
		path, h := o.Handler()
		mux := http.NewServeMux()
		mux.Handle(path, h)
		srv := httptest.NewServer(mux)
		m := &recordingMerger{}
		o.OnPush(m.MergeRemote)
		ms, err := Join(MembershipConfig{Origin: o, BindAddr: gossip, RPCAddr: srv.URL, Secret: "s3cret",
			Discover: SeedsDiscover([]string{"sluice.test:" + strconv.Itoa(port)}, resolver)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ms.Close(); srv.Close(); _ = o.Close() })
		origins, members, mergers = append(origins, o), append(members, ms), append(mergers, m)
	}
	waitFor(t, 15*time.Second, "3 members everywhere", func() bool {
		for _, o := range origins {
			if o.Ring().Len() != 3 {
				return false
			}
		}
		return true
	})

	// An exceed at the owner reaches the other two by gossip.
	k := key("gossiped")
	var owner *Origin
	for _, o := range origins {
		if o.Ring().Owner(k) == o.ID() {
			owner = o
		}
	}
	if _, err := owner.Decide(context.Background(), origin.Check{Key: k, Seq: 3, Asks: []origin.Ask{{Limit: 2, Cost: 2}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the exceed on every node", func() bool {
		for _, m := range mergers {
			if m.get(origin.Cell{Key: k, Sequence: 3}) != 2 {
				return false
			}
		}
		return true
	})

	// A graceful leave shrinks the ring on the others.
	if err := members[2].Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "2 members after a leave", func() bool {
		return origins[0].Ring().Len() == 2 && origins[1].Ring().Len() == 2 && !slices.Contains(origins[0].Ring().Members(), origins[2].ID())
	})
}

// TestWrongSecretDoesNotJoin checks that a node with another secret cannot
// join the gossip.
func TestWrongSecretDoesNotJoin(t *testing.T) {
	port := freePort(t)
	mk := func(i int, secret string, seeds []string) *Origin {
		gossip := net.JoinHostPort(fmt.Sprintf("127.0.0.%d", i), strconv.Itoa(port))
		o, err := New(Config{ID: gossip, Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		ms, err := Join(MembershipConfig{Origin: o, BindAddr: gossip, RPCAddr: "http://127.0.0.1:1", Secret: secret, Discover: SeedsDiscover(seeds, nil)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ms.Close(); _ = o.Close() })
		return o
	}
	a := mk(1, "one", nil)
	b := mk(2, "two", []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
	time.Sleep(2 * time.Second)
	if a.Ring().Len() != 1 || b.Ring().Len() != 1 {
		t.Errorf("members with different secrets: %v and %v", a.Ring().Members(), b.Ring().Members())
	}
}

func TestSeedsDiscover(t *testing.T) {
	resolve := func(_ context.Context, host string) ([]string, error) {
		return map[string][]string{"a.svc": {"10.0.0.2", "10.0.0.1"}, "b.svc": {"::1"}}[host], nil
	}
	got, err := SeedsDiscover([]string{"a.svc:7946", "10.0.0.1:7946", "b.svc:8000"}, resolve)(context.Background())
	want := []string{"10.0.0.1:7946", "10.0.0.2:7946", "[::1]:8000"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %v %v, want %v", got, err, want)
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
