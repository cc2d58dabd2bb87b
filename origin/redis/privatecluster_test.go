package redis

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/origin"
)

// privateCluster is a Redis Cluster of the test's own, with
// cluster-require-full-coverage off, so that the other masters go on
// serving their slots while one is frozen, as a production cluster does
// until its failover. Without replicas, nothing fails a frozen master over.
// Every process is killed when the test ends.
type privateCluster struct {
	t       testing.TB
	addrs   []string // masters first, then their replicas in the same order
	masters int
	procs   []*exec.Cmd
	exited  []chan struct{} // closed when procs[i] has ended
}

// startPrivateCluster starts masters redis-server processes (and a replica
// of each if replicas is set) on free loopback ports, splits the 16384
// slots between the masters in equal ranges and waits until every node
// reports cluster_state:ok.
func startPrivateCluster(t testing.TB, masters int, replicas bool) *privateCluster {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed")
	}
	pc := &privateCluster{t: t, masters: masters}
	n := masters
	if replicas {
		n *= 2
	}
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	t.Cleanup(pc.stop) // after the directories': cleanups run last first, so the servers stop before their directories go
	for _, dir := range dirs {
		pc.startNode(dir)
	}
	ctx := context.Background()
	nodes := make([]*goredis.Client, n)
	for i, addr := range pc.addrs {
		nodes[i] = newTestClient(t, addr)
	}
	for i, node := range nodes {
		if i < masters {
			from, to := i*16384/masters, (i+1)*16384/masters-1
			if err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", from, to).Err(); err != nil {
				t.Fatalf("CLUSTER ADDSLOTSRANGE on %s: %v", pc.addrs[i], err)
			}
		}
		pc.meet(node, pc.addrs[i], pc.addrs[:i]) // every pair meets: no wait for gossip
	}
	pc.waitHealthy(nodes)
	if replicas {
		pc.replicate(nodes)
	}
	return pc
}

// startNode starts one cluster node on a free port, its files in dir, and
// waits until the server on that port is the process it started: another
// process may bind the port (or its bus port) between freeClusterPort's
// check and the server's bind, and then the server exits while someone
// else answers there. It tries another port then, up to five times.
func (pc *privateCluster) startNode(dir string) {
	pc.t.Helper()
	for range 5 {
		port := freeClusterPort(pc.t)
		cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-require-full-coverage", "no")
		if err := cmd.Start(); err != nil {
			pc.t.Fatalf("start redis-server: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if answersAs(pc.t, addr, cmd.Process.Pid, exited) {
			pc.procs = append(pc.procs, cmd)
			pc.exited = append(pc.exited, exited)
			pc.addrs = append(pc.addrs, addr)
			return
		}
		_ = cmd.Process.Kill()
		<-exited
	}
	pc.t.Fatal("no redis-server of the private cluster came up as itself in 5 tries")
}

// answersAs reports whether the Redis server on addr is the process pid,
// waiting up to 10 s for it to answer; false at once if exited is closed
// (the process ended, most likely because its port was taken).
func answersAs(t testing.TB, addr string, pid int, exited <-chan struct{}) bool {
	c := newTestClient(t, addr)
	want := "process_id:" + strconv.Itoa(pid) + "\r\n"
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			return false
		default:
		}
		if info, err := c.Info(context.Background(), "server").Result(); err == nil {
			return strings.Contains(info, want)
		}
	}
	return false
}

// waitHealthy waits until every node knows every other and every slot's
// master, and reports cluster_state:ok. (Without full coverage required, a
// node reports ok before gossip has told it every slot's master: a client
// that loaded the slot map from it would send the missing slots' keys to a
// random node.) A node that still misses a peer after 2 s meets every peer
// again: a handshake not done within the node timeout (a loaded machine)
// is dropped, and nothing retries it.
func (pc *privateCluster) waitHealthy(nodes []*goredis.Client) {
	pc.t.Helper()
	ctx := context.Background()
	var last string // the CLUSTER INFO of a node not ready yet
	notReady := func() int {
		for i, n := range nodes {
			info, err := n.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_slots_assigned:16384") ||
				!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(nodes))) {
				last = fmt.Sprintf("%s: %v %s", pc.addrs[i], err, info)
				return i
			}
		}
		return -1
	}
	start := time.Now()
	for lastMeet := start; ; time.Sleep(50 * time.Millisecond) {
		i := notReady()
		switch {
		case i < 0:
			return
		case time.Since(start) > 30*time.Second:
			pc.t.Fatalf("the private cluster is not ok after 30s; %s", last)
		case time.Since(lastMeet) > 2*time.Second:
			lastMeet = time.Now()
			pc.meet(nodes[i], pc.addrs[i], slices.Delete(slices.Clone(pc.addrs), i, i+1))
		}
	}
}

// meet sends node (at addr) a CLUSTER MEET for every peer.
func (pc *privateCluster) meet(node *goredis.Client, addr string, peers []string) {
	pc.t.Helper()
	for _, peer := range peers {
		host, port, _ := net.SplitHostPort(peer)
		if err := node.ClusterMeet(context.Background(), host, port).Err(); err != nil {
			pc.t.Fatalf("CLUSTER MEET from %s: %v", addr, err)
		}
	}
}

// replicate makes node masters+i a replica of master i and waits until
// each replica's link to its master is up.
func (pc *privateCluster) replicate(nodes []*goredis.Client) {
	pc.t.Helper()
	ctx := context.Background()
	for i := range pc.masters {
		id, err := nodes[i].Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			pc.t.Fatalf("CLUSTER MYID on %s: %v", pc.addrs[i], err)
		}
		if err := nodes[pc.masters+i].Do(ctx, "CLUSTER", "REPLICATE", id).Err(); err != nil {
			pc.t.Fatalf("CLUSTER REPLICATE on %s: %v", pc.addrs[pc.masters+i], err)
		}
	}
	eventually(pc.t, 20*time.Second, "the replicas to sync", func() bool {
		for _, n := range nodes[pc.masters:] {
			info, err := n.Info(ctx, "replication").Result()
			if err != nil || !strings.Contains(info, "master_link_status:up") {
				return false
			}
		}
		return true
	})
	pc.waitHealthy(nodes)
}

// freeClusterPort returns a free loopback port whose cluster bus port (the
// port + 10000) is free too.
func freeClusterPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

// client returns a cluster client of the private cluster built the way
// `--redis-url` builds one (NewClient), closed when the test ends.
func (pc *privateCluster) client() *goredis.ClusterClient {
	pc.t.Helper()
	url := "redis://" + pc.addrs[0] + "?cluster=true"
	for _, a := range pc.addrs[1:] {
		url += "&addr=" + a
	}
	c, err := NewClient(url)
	if err != nil {
		pc.t.Fatal(err)
	}
	cc := c.(*goredis.ClusterClient)
	pc.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// freeze stops node i (SIGSTOP): the kernel still accepts its connections,
// nothing answers. It returns the function that thaws it (SIGCONT), which
// also runs when the test ends.
func (pc *privateCluster) freeze(i int) (thaw func()) {
	pc.t.Helper()
	p := pc.procs[i].Process
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		pc.t.Fatalf("SIGSTOP %s: %v", pc.addrs[i], err)
	}
	thawed := false
	thaw = func() {
		if !thawed {
			thawed = true
			_ = p.Signal(syscall.SIGCONT)
		}
	}
	pc.t.Cleanup(thaw)
	return thaw
}

// stop kills every node (SIGKILL ends a stopped process too).
func (pc *privateCluster) stop() {
	for i, cmd := range pc.procs {
		_ = cmd.Process.Kill()
		<-pc.exited[i]
	}
}

// node returns the index of the master that served key when the cluster
// started: master i serves the slots from i*16384/n up to (i+1)*16384/n
// (excluded) of n masters.
func (pc *privateCluster) node(key string) int {
	slot, n := clusterSlot(key), pc.masters
	i := 0
	for (i+1)*16384/n <= slot {
		i++
	}
	return i
}

// keysOn returns n keys of workspace ws in namespace ns, with a window of
// d, whose cells live on master i (the cells of one key share a slot).
func (pc *privateCluster) keysOn(i, n int, ws, ns string, d time.Duration) []origin.Key {
	var keys []origin.Key
	for j := 0; len(keys) < n; j++ {
		k := origin.Key{Workspace: ws, Namespace: ns, Identifier: "id-" + strconv.Itoa(j), Duration: d}
		if pc.node(CellKey(origin.Cell{Key: k})) == i {
			keys = append(keys, k)
		}
	}
	return keys
}
