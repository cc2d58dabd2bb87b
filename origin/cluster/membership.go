package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Presets of failure detection and gossip.
const (
	// PresetLAN suits nodes in one data centre: probes every second,
	// gossip every 200 ms; a dead node is declared in about 5 s.
	PresetLAN = "lan"
	// PresetWAN suits nodes across high-latency links: probes every 5 s,
	// gossip every 500 ms; a dead node is declared in about 30 s.
	PresetWAN = "wan"
)

// DefaultRejoinInterval is how often a member re-resolves its seeds and
// joins the ones that are not members (new nodes behind a DNS name, the
// other side of a partition that healed, which memberlist alone may take
// its 30 s push-pull period or more to find again). A round that finds
// every seed a member costs one discovery (a DNS lookup or a Redis read).
const DefaultRejoinInterval = 5 * time.Second

// Discover returns gossip addresses (host:port) of nodes to join.
type Discover func(ctx context.Context) ([]string, error)

// Resolver returns the IP addresses of host (A and AAAA records), like
// net.Resolver.LookupHost. Tests inject a fake one.
type Resolver func(ctx context.Context, host string) ([]string, error)

// SeedsDiscover returns a [Discover] that resolves seeds (host:port): a name
// stands for all its addresses, resolved again on every call, so a
// Kubernetes headless Service or a Cloud Map name works. resolve nil means
// net.DefaultResolver.LookupHost.
func SeedsDiscover(seeds []string, resolve Resolver) Discover {
	if resolve == nil {
		resolve = net.DefaultResolver.LookupHost
	}
	return func(ctx context.Context) ([]string, error) {
		var out []string
		var firstErr error
		for _, s := range seeds {
			host, port, err := net.SplitHostPort(s)
			if err != nil {
				return nil, fmt.Errorf("cluster: seed %q: %w", s, err)
			}
			if net.ParseIP(host) != nil {
				out = append(out, s)
				continue
			}
			ips, err := resolve(ctx, host)
			if err != nil {
				firstErr = cmpErr(firstErr, fmt.Errorf("cluster: resolving seed %q: %w", host, err))
				continue
			}
			for _, ip := range ips {
				out = append(out, net.JoinHostPort(ip, port))
			}
		}
		slices.Sort(out)
		out = slices.Compact(out)
		if len(out) == 0 && firstErr != nil {
			return nil, firstErr
		}
		return out, nil
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// MembershipConfig configures [Join].
type MembershipConfig struct {
	// Origin is the cluster origin whose peers the membership keeps up to
	// date and whose exceed broadcasts it gossips. Required; its ID is this
	// member's name.
	Origin *Origin
	// BindAddr is the gossip address (host:port, TCP and UDP). Required.
	BindAddr string
	// AdvertiseAddr is the gossip address other members use, when BindAddr
	// is not reachable by them. Default: BindAddr.
	AdvertiseAddr string
	// RPCAddr is the base URL of this node's peer RPC (http://host:port),
	// carried in its metadata. Required.
	RPCAddr string
	// Secret is the cluster secret: the gossip is encrypted and
	// authenticated with SHA-256(Secret) (AES-256-GCM). Empty: clear text.
	Secret string
	// Preset is PresetLAN (default) or PresetWAN.
	Preset string
	// Discover finds nodes to join, at start and every RejoinInterval. Nil:
	// the node waits to be joined.
	Discover Discover
	// RejoinInterval defaults to DefaultRejoinInterval; until the first
	// join succeeds, discovery is retried every second.
	RejoinInterval time.Duration
	// Logger defaults to the Origin's.
	Logger *slog.Logger
}

// Membership is this node's membership of the cluster (memberlist): it
// keeps the Origin's peers in line with the live members and carries the
// exceed broadcasts. Close it to leave.
type Membership struct {
	cfg   MembershipConfig
	o     *Origin
	log   *slog.Logger
	ml    *memberlist.Memberlist
	queue *memberlist.TransmitLimitedQueue
	meta  []byte

	mu      sync.Mutex
	members map[string]Member // by name, this node included

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	leaveOnce sync.Once
	leaveErr  error
	once      sync.Once
}

// nodeMeta is the metadata each member gossips: how to reach its peer RPC
// and which incarnation to sign calls for. With a cluster secret the gossip
// is encrypted, so the incarnation is known to members only.
type nodeMeta struct {
	RPC string `json:"rpc"`
	Inc string `json:"inc"`
}

// Join starts gossiping on cfg.BindAddr and joins the nodes cfg.Discover
// finds, retrying in the background until one answers; it returns as soon
// as the gossip listens.
func Join(cfg MembershipConfig) (*Membership, error) {
	if cfg.Origin == nil || cfg.RPCAddr == "" {
		return nil, fmt.Errorf("%w: Origin and RPCAddr are required", ErrInvalidConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = cfg.Origin.cfg.Logger
	}
	if cfg.RejoinInterval <= 0 {
		cfg.RejoinInterval = DefaultRejoinInterval
	}
	var mc *memberlist.Config
	switch cfg.Preset {
	case "", PresetLAN:
		mc = memberlist.DefaultLANConfig()
	case PresetWAN:
		mc = memberlist.DefaultWANConfig()
	default:
		return nil, fmt.Errorf("%w: preset %q: want %q or %q", ErrInvalidConfig, cfg.Preset, PresetLAN, PresetWAN)
	}
	host, port, err := splitHostPort(cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("%w: bind address: %w", ErrInvalidConfig, err)
	}
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertisePort = port
	if cfg.AdvertiseAddr != "" {
		if mc.AdvertiseAddr, mc.AdvertisePort, err = splitHostPort(cfg.AdvertiseAddr); err != nil {
			return nil, fmt.Errorf("%w: advertise address: %w", ErrInvalidConfig, err)
		}
	}
	if cfg.Secret != "" {
		mc.SecretKey = gossipKey(cfg.Secret)
	}
	mc.Name = cfg.Origin.ID()
	mc.DeadNodeReclaimTime = 30 * time.Second
	meta, err := json.Marshal(nodeMeta{RPC: cfg.RPCAddr, Inc: cfg.Origin.Incarnation()})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Membership{cfg: cfg, o: cfg.Origin, log: cfg.Logger, meta: meta,
		members: map[string]Member{}, ctx: ctx, cancel: cancel}
	mc.Delegate = delegate{m}
	mc.Events = events{m}
	mc.Logger = log.New(&logWriter{gate: newLogGate(cfg.Logger, LogGossip, cfg.Origin.cfg.Observer)}, "", 0)
	m.queue = &memberlist.TransmitLimitedQueue{NumNodes: func() int { return m.numMembers() }, RetransmitMult: mc.RetransmitMult}
	m.ml, err = memberlist.Create(mc)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cluster: gossip on %s: %w", cfg.BindAddr, err)
	}
	m.o.setBroadcaster(m.broadcast)
	m.wg.Go(m.joinLoop)
	m.log.Info("cluster: gossiping", "name", mc.Name, "incarnation", cfg.Origin.Incarnation(), "bind", cfg.BindAddr, "advertise", cfg.AdvertiseAddr, "rpc", cfg.RPCAddr, "preset", cmpStr(cfg.Preset, PresetLAN), "encrypted", cfg.Secret != "")
	return m, nil
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, port, nil
}

// Members returns the live members' names.
func (m *Membership) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.members))
	for n := range m.members {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (m *Membership) numMembers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(1, len(m.members))
}

// joinLoop joins what Discover finds: every second until a join succeeds,
// then every RejoinInterval, joining only the addresses that are not
// members.
func (m *Membership) joinLoop() {
	if m.cfg.Discover == nil {
		return
	}
	joined := false
	for {
		if n := m.joinDiscovered(); n > 0 {
			joined = true
		}
		wait := m.cfg.RejoinInterval
		if !joined && len(m.Members()) <= 1 {
			wait = time.Second
		}
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// joinDiscovered joins the discovered addresses that are not members and
// returns how many answered.
func (m *Membership) joinDiscovered() int {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	addrs, err := m.cfg.Discover(ctx)
	if err != nil {
		m.log.Warn("cluster: discovery failed", "err", err)
		return 0
	}
	known := map[string]bool{}
	for _, n := range m.ml.Members() {
		known[net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))] = true
	}
	self := m.ml.LocalNode()
	known[net.JoinHostPort(self.Addr.String(), strconv.Itoa(int(self.Port)))] = true
	var todo []string
	for _, a := range addrs {
		if !known[a] {
			todo = append(todo, a)
		}
	}
	if len(todo) == 0 {
		return 0
	}
	n, err := m.ml.Join(todo)
	if n == 0 && err != nil {
		m.log.Debug("cluster: join found no live node yet", "addrs", todo, "err", err)
	} else if n > 0 {
		m.log.Info("cluster: joined", "contacted", n, "members", m.ml.NumMembers())
	}
	return n
}

// broadcast gossips an exceed to every member.
func (m *Membership) broadcast(e exceed) {
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	k := e.K.key()
	name := fmt.Sprintf("%s\x00%s\x00%s\x00%d\x00%d", k.Workspace, k.Namespace, k.Identifier, e.K.D, e.S)
	m.queue.QueueBroadcast(&exceedBroadcast{name: name, msg: b})
}

// Leave tells the other members that this node is leaving (waiting up to
// 2 s for the message to spread), so that they re-home its identities at
// once, and stops joining. The gossip goes on until Close. A node leaves as
// a graceful shutdown starts, before it drains its requests. Leave is
// idempotent and returns the first call's error.
func (m *Membership) Leave() error {
	m.leaveOnce.Do(func() {
		m.cancel()
		m.wg.Wait()
		if err := m.ml.Leave(2 * time.Second); err != nil {
			m.leaveErr = fmt.Errorf("cluster: leave: %w", err)
		}
	})
	return m.leaveErr
}

// Close leaves the cluster if Leave was not called and stops the gossip.
// It is idempotent and returns the leave's error, if any.
func (m *Membership) Close() error {
	var err error
	m.once.Do(func() {
		err = m.Leave()
		if e := m.ml.Shutdown(); e != nil && err == nil {
			err = fmt.Errorf("cluster: shutdown: %w", e)
		}
	})
	return err
}

// update applies a member's join, change or departure to the Origin.
func (m *Membership) update(n *memberlist.Node, alive bool) {
	m.mu.Lock()
	if alive {
		var meta nodeMeta
		if err := json.Unmarshal(n.Meta, &meta); err != nil || meta.RPC == "" || len(meta.Inc) != incarnationLen {
			m.mu.Unlock()
			m.log.Warn("cluster: member without a peer RPC address or incarnation ignored (a node of an earlier version?)", "member", n.Name)
			return
		}
		m.members[n.Name] = Member{RPC: meta.RPC, Incarnation: meta.Inc}
	} else {
		delete(m.members, n.Name)
	}
	peers := make(map[string]Member, len(m.members))
	for k, v := range m.members {
		peers[k] = v
	}
	m.mu.Unlock()
	m.o.SetPeers(peers)
}

type exceedBroadcast struct {
	name string
	msg  []byte
}

func (b *exceedBroadcast) Invalidates(other memberlist.Broadcast) bool {
	nb, ok := other.(memberlist.NamedBroadcast)
	return ok && nb.Name() == b.name
}
func (b *exceedBroadcast) Name() string    { return b.name }
func (b *exceedBroadcast) Message() []byte { return b.msg }
func (b *exceedBroadcast) Finished()       {}

// delegate is memberlist's Delegate: metadata and user messages.
type delegate struct{ m *Membership }

func (d delegate) NodeMeta(limit int) []byte {
	if len(d.m.meta) > limit {
		return nil
	}
	return d.m.meta
}

func (d delegate) NotifyMsg(b []byte) {
	var e exceed
	if err := json.Unmarshal(b, &e); err != nil {
		return
	}
	d.m.o.receive(e)
}

func (d delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.m.queue.GetBroadcasts(overhead, limit)
}

func (d delegate) LocalState(bool) []byte            { return nil }
func (d delegate) MergeRemoteState(_ []byte, _ bool) {}

// events is memberlist's EventDelegate.
type events struct{ m *Membership }

func (e events) NotifyJoin(n *memberlist.Node) {
	e.m.log.Info("cluster: member joined", "member", n.Name, "addr", n.Address())
	e.m.update(n, true)
}

func (e events) NotifyLeave(n *memberlist.Node) {
	e.m.log.Info("cluster: member left or failed", "member", n.Name, "addr", n.Address())
	e.m.update(n, false)
}

func (e events) NotifyUpdate(n *memberlist.Node) { e.m.update(n, true) }

// logWriter sends memberlist's log lines to slog: [ERR] and [WARN] lines at
// warning level, the rest at debug level, through a logGate: memberlist
// logs a line per garbage packet or connection, and UDP packets are easy
// to spoof.
type logWriter struct{ gate *logGate }

func (w *logWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	level := slog.LevelDebug
	if bytes.Contains(p, []byte("[ERR]")) || bytes.Contains(p, []byte("[WARN]")) {
		level = slog.LevelWarn
	}
	w.gate.write(level, "memberlist: "+line)
	return len(p), nil
}
