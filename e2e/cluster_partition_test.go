package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// netns is a network namespace this test made, removed at cleanup.
type netns string

// ip runs the ip command.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// partitionNet builds two network namespaces joined by a link that the test
// can cut: A (169.254.100.1) and B (169.254.100.2) on the cluster link, each
// also reachable from the test through its own link (A at 169.254.N.2, B at
// 169.254.N.6, N from the process id, so that two runs at once do not share
// the host's addresses; N is never 100, the cluster link's). It skips the
// test where namespaces cannot be made.
func partitionNet(t *testing.T) (a, b netns, hostA, hostB string, cut, heal func()) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command (iproute2): cannot build the network namespaces")
	}
	tag := fmt.Sprintf("%05d", os.Getpid()%100000)
	subnet := fmt.Sprintf("169.254.%d.", 101+os.Getpid()%150) // 101 to 250: clear of 169.254.100.0/24
	a, b = netns("sluiceA"+tag), netns("sluiceB"+tag)
	if err := ip("netns", "add", string(a)); err != nil {
		t.Skipf("cannot make a network namespace (needs CAP_NET_ADMIN): %v", err)
	}
	t.Cleanup(func() { _ = ip("netns", "del", string(a)) })
	if err := ip("netns", "add", string(b)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ip("netns", "del", string(b)) })
	hA, hB := "slh"+tag+"a", "slh"+tag+"b" // host ends, at most 15 characters
	t.Cleanup(func() { _ = ip("link", "del", hA); _ = ip("link", "del", hB) })
	for _, step := range [][]string{
		{"-n", string(a), "link", "set", "lo", "up"},
		{"-n", string(b), "link", "set", "lo", "up"},
		// The cluster link between A and B.
		{"link", "add", "slc" + tag + "a", "netns", string(a), "type", "veth", "peer", "name", "slc" + tag + "b", "netns", string(b)},
		{"-n", string(a), "addr", "add", "169.254.100.1/24", "dev", "slc" + tag + "a"},
		{"-n", string(b), "addr", "add", "169.254.100.2/24", "dev", "slc" + tag + "b"},
		{"-n", string(a), "link", "set", "slc" + tag + "a", "up"},
		{"-n", string(b), "link", "set", "slc" + tag + "b", "up"},
		// The test's links to A and to B.
		{"link", "add", hA, "type", "veth", "peer", "name", "slt" + tag + "a", "netns", string(a)},
		{"addr", "add", subnet + "1/30", "dev", hA},
		{"link", "set", hA, "up"},
		{"-n", string(a), "addr", "add", subnet + "2/30", "dev", "slt" + tag + "a"},
		{"-n", string(a), "link", "set", "slt" + tag + "a", "up"},
		{"link", "add", hB, "type", "veth", "peer", "name", "slt" + tag + "b", "netns", string(b)},
		{"addr", "add", subnet + "5/30", "dev", hB},
		{"link", "set", hB, "up"},
		{"-n", string(b), "addr", "add", subnet + "6/30", "dev", "slt" + tag + "b"},
		{"-n", string(b), "link", "set", "slt" + tag + "b", "up"},
	} {
		if err := ip(step...); err != nil {
			t.Fatal(err)
		}
	}
	link := "slc" + tag + "a"
	cut = func() {
		if err := ip("-n", string(a), "link", "set", link, "down"); err != nil {
			t.Error(err)
		}
	}
	heal = func() {
		if err := ip("-n", string(a), "link", "set", link, "up"); err != nil {
			t.Error(err)
		}
	}
	return a, b, subnet + "2", subnet + "6", cut, heal
}

// startInNetns runs `sluice serve` in network namespace ns with its HTTP API
// on port httpPort and its admin listener on port adminPort of every
// address there, reached from the test at host.
func startInNetns(t *testing.T, ns netns, host string, httpPort, adminPort int, gossip string, seeds []string, ws string) *clusterNode {
	t.Helper()
	var others []string
	for _, s := range seeds {
		if s != gossip {
			others = append(others, s)
		}
	}
	args := []string{"netns", "exec", string(ns), binary, "serve", "--log-format", "json", "--data-dir", t.TempDir(),
		"--http-addr", fmt.Sprintf("0.0.0.0:%d", httpPort), "--admin-addr", fmt.Sprintf("0.0.0.0:%d", adminPort),
		"--origin", "cluster", "--cluster-addr", gossip, "--cluster-join", strings.Join(others, ","),
		"--cluster-secret", "partition-test-secret-0123456789abcdef", "--root-key", rk + ":" + ws}
	n := &node{t: t, cmd: exec.Command("ip", args...), done: make(chan struct{})}
	n.cmd.Env = cleanEnv()
	stderr, err := n.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			n.mu.Lock()
			n.log.WriteString(line + "\n")
			n.mu.Unlock()
			var rec struct{ Msg string }
			if !sent && json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" {
				close(listening)
				sent = true
			}
		}
	}()
	go func() { n.err = n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() { _ = n.stop(10 * time.Second) })
	select {
	case <-listening:
	case <-n.done:
		t.Fatalf("sluice exited before listening (%v):\n%s", n.err, n.logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice did not listen within 30s:\n%s", n.logs())
	}
	n.URL = fmt.Sprintf("http://%s:%d", host, httpPort)
	return &clusterNode{node: n, gossip: gossip, admin: fmt.Sprintf("http://%s:%d", host, adminPort)}
}

// TestClusterPartition cuts the link between a node and the two others
// (network namespaces) for 10 s under load: both sides keep answering every
// request, the side of two drops the lone node (which, with no one to
// confirm its suspicions, may take longer to drop them), and once the link
// is back the three agree on three members and a whole window admits what
// the reference model admits.
func TestClusterPartition(t *testing.T) {
	t.Parallel() // with the other cluster tests (make test: three at a time): their time is mostly waiting on windows
	if testing.Short() {
		t.Skip("30 s of load")
	}
	a, b, hostA, hostB, cut, heal := partitionNet(t)
	const (
		ids   = 10
		limit = 30
		d     = 3 * time.Second
		cells = 10
	)
	ws := fmt.Sprintf("e2e-partition-%d", time.Now().UnixNano())
	seeds := []string{"169.254.100.1:7946", "169.254.100.2:7946", "169.254.100.2:7947"}
	nodes := []*clusterNode{
		startInNetns(t, a, hostA, 7070, 7080, seeds[0], seeds, ws),
		startInNetns(t, b, hostB, 7070, 7080, seeds[1], seeds, ws),
		startInNetns(t, b, hostB, 7071, 7081, seeds[2], seeds, ws),
	}
	waitMembers(t, nodes, 3, 20*time.Second)

	begin := nextCell(d)
	cutAt := begin.Add(d + d/2)
	healAt := cutAt.Add(10 * time.Second)
	var split time.Duration // when the side of two saw only itself
	var alone float64       // the lone node's members at the end of the cut
	healed := make(chan time.Duration, 1)
	go func() {
		time.Sleep(time.Until(cutAt))
		cut()
		for time.Now().Before(healAt) {
			if split == 0 {
				vb, errB := scrapeMembers(nodes[1])
				vc, errC := scrapeMembers(nodes[2])
				if errB == nil && errC == nil && vb == 2 && vc == 2 {
					split = time.Since(cutAt)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		alone, _ = scrapeMembers(nodes[0])
		heal()
		healed <- timeToAgree(nodes, 3, 20*time.Second)
	}()
	out := clusterLoad(func(time.Time) []*clusterNode { return nodes }, ids, limit, d, begin, cells*d)
	took := <-healed
	if len(out.failures) > 0 {
		t.Errorf("%d requests failed; first: %s", len(out.failures), out.failures[0])
	}
	engine, model := compare(out.results, limit, d, begin, cells)
	t.Logf("link cut for %v; the side of two alone after %v, the lone node seeing %v members at the end; 3 members again %v after the link came back; admitted per window (nodes %v, model %v); load average %s",
		healAt.Sub(cutAt), split.Round(100*time.Millisecond), alone, took.Round(100*time.Millisecond), engine, model, loadavg())
	if split == 0 {
		t.Error("the side of two never dropped the lone node: the link was not cut long enough")
	}
	if took == 0 {
		t.Fatal("the cluster did not agree on 3 members within 20s of the link coming back")
	}
	first := int((healAt.Add(took).Sub(begin) + d - 1) / d)
	if first >= cells {
		t.Fatalf("no whole window left after healing (window %d)", first)
	}
	for c := first; c < cells; c++ {
		if dev := float64(engine[c]-model[c]) / float64(model[c]); dev > 0.05 || dev < -0.05 {
			t.Errorf("window %d (after healing): admitted %d, model %d (%+.1f%%), beyond ±5%%", c, engine[c], model[c], 100*dev)
		}
	}
}
