package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/cluster"
	"github.com/sluicehq/sluice/origin/redis"
)

// ClusterFlags are the flags of the cluster origin (--origin cluster),
// embedded in serveCmd.
type ClusterFlags struct {
	ClusterAddr       string   `name:"cluster-addr" default:"127.0.0.1:7946" help:"Gossip address of the cluster origin (TCP and UDP)."`
	ClusterAdvertise  string   `name:"cluster-advertise" placeholder:"HOST:PORT" help:"Gossip address the other nodes use, when --cluster-addr is not reachable by them."`
	ClusterJoin       []string `name:"cluster-join" sep:"," placeholder:"HOST:PORT,..." help:"Nodes to join (comma-separated). A DNS name stands for all its A/AAAA records and is resolved again every 5s, joining the addresses that are not members (a headless Service works; a healed partition rejoins). Without it and with --redis-url, nodes find each other through Redis."`
	ClusterSecret     string   `name:"cluster-secret" help:"Cluster secret, at least 32 bytes: encrypts the gossip and authenticates the peer RPC. Required unless every address is loopback. Prefer --cluster-secret-file or SLUICE_CLUSTER_SECRET: a flag is visible to every local user (ps)."`
	ClusterSecretFile string   `name:"cluster-secret-file" type:"path" placeholder:"FILE" help:"File holding the cluster secret (one trailing newline is removed), instead of --cluster-secret."`
	ClusterPreset     string   `name:"cluster-preset" enum:"lan,wan" default:"lan" help:"Failure detection and gossip timing: lan or wan."`

	origin *cluster.Origin  // set by newClusterOrigin
	certs  *tlsCertificates // set by Run when the API port serves TLS
	secret string           // the secret in force, set by validate
}

// minClusterSecretBytes is the shortest cluster secret accepted: the
// gossip key and the RPC's HMAC key are derived from it, and a short
// secret can be guessed offline from one captured packet.
const minClusterSecretBytes = 32

// loadSecret sets f.secret from --cluster-secret or --cluster-secret-file
// and checks its length.
func (f *ClusterFlags) loadSecret() error {
	switch {
	case f.ClusterSecret != "" && f.ClusterSecretFile != "":
		return errors.New("--cluster-secret and --cluster-secret-file: set one, not both")
	case f.ClusterSecretFile != "":
		b, err := os.ReadFile(f.ClusterSecretFile)
		if err != nil {
			return fmt.Errorf("--cluster-secret-file: %w", err)
		}
		s, _ := strings.CutSuffix(string(b), "\n")
		f.secret = strings.TrimSuffix(s, "\r")
		if f.secret == "" {
			return fmt.Errorf("--cluster-secret-file %s: the file is empty", f.ClusterSecretFile)
		}
	default:
		f.secret = f.ClusterSecret
	}
	if f.secret != "" && len(f.secret) < minClusterSecretBytes {
		return fmt.Errorf("--cluster-secret: the secret is %d bytes long; it must be at least %d bytes (e.g. openssl rand -hex 32)", len(f.secret), minClusterSecretBytes)
	}
	return nil
}

// validate checks the cluster flags of a node that serves HTTP on httpAddr.
func (f *ClusterFlags) validate(httpAddr string) error {
	if err := f.loadSecret(); err != nil {
		return err
	}
	addrs := []string{httpAddr, f.ClusterAddr}
	if _, _, err := net.SplitHostPort(f.ClusterAddr); err != nil {
		return fmt.Errorf("--cluster-addr %q: %w", f.ClusterAddr, err)
	}
	if f.ClusterAdvertise != "" {
		if _, _, err := net.SplitHostPort(f.ClusterAdvertise); err != nil {
			return fmt.Errorf("--cluster-advertise %q: %w", f.ClusterAdvertise, err)
		}
		addrs = append(addrs, f.ClusterAdvertise)
	}
	for _, s := range f.ClusterJoin {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("--cluster-join %q: want host:port: %w", s, err)
		}
		addrs = append(addrs, s)
	}
	if f.secret == "" {
		for _, a := range addrs {
			if !isLoopback(a) {
				return fmt.Errorf("--origin cluster: %s is not a loopback address: set --cluster-secret-file (or SLUICE_CLUSTER_SECRET, or --cluster-secret) to encrypt the gossip and authenticate the peer RPC", a)
			}
		}
	}
	return nil
}

// name is this node's member name: its gossip address as the others see
// it, stable across restarts so that a node that comes back takes its
// identities back.
func (f *ClusterFlags) name() string {
	if f.ClusterAdvertise != "" {
		return f.ClusterAdvertise
	}
	return f.ClusterAddr
}

// newClusterOrigin creates the cluster origin, alone on its ring until
// joinCluster; its metrics are sluice_cluster_*.
func (c *serveCmd) newClusterOrigin(log *slog.Logger, reg prometheus.Registerer, cl *cleanup) (origin.Origin, error) {
	cfg := cluster.Config{
		ID:                   c.name(),
		Secret:               c.secret,
		Logger:               log,
		Observer:             newClusterObserver(reg),
		MaxCells:             c.MaxCounters,
		MaxCellsPerWorkspace: c.MaxCountersPerWorkspace,
	}
	if c.certs != nil {
		// The peers serve their RPC on their TLS API ports.
		client, err := c.certs.peerClient()
		if err != nil {
			return nil, err
		}
		cfg.Client = client
	}
	o, err := cluster.New(cfg)
	if err != nil {
		return nil, err
	}
	cl.add(func() { _ = o.Close() })
	c.origin = o
	return o, nil
}

// clusterServices adds the peer RPC of the cluster origin to services.
func (c *serveCmd) clusterServices(services map[string]http.Handler) map[string]http.Handler {
	if c.origin == nil {
		return services
	}
	if services == nil {
		services = map[string]http.Handler{}
	}
	path, h := c.origin.Handler()
	services[path] = h
	return services
}

// joinCluster, once the HTTP port (and so the peer RPC) listens on
// httpAddr, joins the cluster (sluice.New routed the exceed broadcasts to
// the limiter already):
// through --cluster-join, else through the Redis registry with
// --redis-url, else it waits to be joined. The node leaves as soon as ctx
// ends (the shutdown signal), before the HTTP server drains, so the others
// stop routing to it; the gossip stops at cleanup.
func (c *serveCmd) joinCluster(ctx context.Context, httpAddr string, log *slog.Logger, cl *cleanup) error {
	o := c.origin
	if o == nil {
		return nil
	}
	rpc, err := c.rpcURL(httpAddr)
	if err != nil {
		return err
	}
	var discover cluster.Discover
	switch {
	case len(c.ClusterJoin) > 0:
		discover = cluster.SeedsDiscover(c.ClusterJoin, nil)
	case c.RedisURL != "":
		client, err := redis.NewClient(c.RedisURL)
		if err != nil {
			return fmt.Errorf("--redis-url: %w", err)
		}
		cl.add(func() { _ = client.Close() })
		regCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		reg, err := cluster.NewRegistry(regCtx, client, c.Region, c.name(), c.name(), log)
		if err != nil {
			return err
		}
		cl.add(func() { _ = reg.Close() })
		discover = reg.Discover
		log.Info("cluster: discovering nodes through the Redis registry", "key", cluster.RegistryKey(c.Region))
	default:
		log.Warn("cluster: no --cluster-join and no --redis-url: this node waits for others to join it")
	}
	ms, err := cluster.Join(cluster.MembershipConfig{
		Origin:        o,
		BindAddr:      c.ClusterAddr,
		AdvertiseAddr: c.ClusterAdvertise,
		RPCAddr:       rpc,
		Secret:        c.secret,
		Preset:        c.ClusterPreset,
		Discover:      discover,
		Logger:        log,
	})
	if err != nil {
		return err
	}
	leave := func() {
		log.Info("cluster: leaving")
		if err := ms.Leave(); err != nil {
			log.Warn("cluster: leaving", "err", err)
		}
	}
	stopLeave := context.AfterFunc(ctx, leave)
	cl.add(func() {
		if stopLeave() { // a failed start: ctx did not end
			leave()
		}
		_ = ms.Close()
	})
	return nil
}

// rpcURL is the base URL of this node's peer RPC: the HTTP listener's
// address, with the gossip host in place of an unspecified one, over TLS
// when the API port serves TLS.
func (c *serveCmd) rpcURL(httpAddr string) (string, error) {
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		gh, _, _ := net.SplitHostPort(c.name())
		if ip := net.ParseIP(gh); gh == "" || (ip != nil && ip.IsUnspecified()) {
			return "", errors.New("--origin cluster: --http-addr and the gossip address are both unspecified: set --cluster-advertise to a reachable host:port")
		}
		host = gh
	}
	scheme := "http://"
	if c.tlsEnabled() {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, port), nil
}

// clusterMetrics are the cluster origin's Prometheus metrics of its
// traffic; with those of refusals and dropped log lines (clusterObserver)
// they implement its [cluster.Observer].
type clusterMetrics struct {
	members     prometheus.Gauge
	ringChanges prometheus.Counter
	seeded      prometheus.Counter
	rpcs        *prometheus.CounterVec
	rpcSeconds  *prometheus.HistogramVec
	sent, recv  prometheus.Counter
}

func newClusterMetrics(reg prometheus.Registerer) *clusterMetrics {
	m := &clusterMetrics{
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_cluster_members", Help: "Live members of the cluster, this node included.",
		}),
		ringChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_cluster_ring_changes_total", Help: "Changes of the ring's members seen by this node.",
		}),
		seeded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_cluster_cells_seeded_total", Help: "Cells this node handed to their new owner after a ring change.",
		}),
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cluster_rpcs_total", Help: "Peer RPCs sent by this node, by kind (load, apply, decide, decides, seed, withdraw, analytics; lead, nominate, nominated and import for the global layer) and outcome.",
		}, []string{"kind", "outcome"}),
		rpcSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_cluster_rpc_duration_seconds", Help: "Duration of the peer RPCs sent by this node, by kind.",
			Buckets: prometheus.ExponentialBuckets(.0001, 4, 8),
		}, []string{"kind"}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_cluster_broadcasts_sent_total", Help: "Exceed broadcasts this node sent as an owner.",
		}),
		recv: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_cluster_broadcasts_received_total", Help: "Exceed broadcasts this node received.",
		}),
	}
	reg.MustRegister(m.members, m.ringChanges, m.seeded, m.rpcs, m.rpcSeconds, m.sent, m.recv)
	return m
}

// RPC implements [cluster.Observer].
func (m *clusterMetrics) RPC(kind cluster.Kind, out cluster.Outcome, elapsed time.Duration) {
	m.rpcs.WithLabelValues(string(kind), string(out)).Inc()
	m.rpcSeconds.WithLabelValues(string(kind)).Observe(elapsed.Seconds())
}

// Members implements [cluster.Observer].
func (m *clusterMetrics) Members(n int) { m.members.Set(float64(n)) }

// RingChanged implements [cluster.Observer].
func (m *clusterMetrics) RingChanged(seeded int) {
	m.ringChanges.Inc()
	m.seeded.Add(float64(seeded))
}

// BroadcastSent implements [cluster.Observer].
func (m *clusterMetrics) BroadcastSent() { m.sent.Inc() }

// BroadcastReceived implements [cluster.Observer].
func (m *clusterMetrics) BroadcastReceived() { m.recv.Inc() }
