package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/redis"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/mysql"
	storeredis "github.com/sluicehq/sluice/store/redis"
	"github.com/sluicehq/sluice/store/sqlite"
)

// defaultGCPercent is the garbage collector's target that `sluice serve`
// uses when the environment does not set GOGC. A request leaves only
// garbage behind and the live heap of a small deployment is a few MB, so Go's
// default (100, with a 4 MB floor) collects very often. 200 measured 12% more
// requests/s with a small heap for about 10 MB more RSS, and 8% more with
// 100k active identities for about 50% more RSS (docs/benchmarks/server.md).
// GOGC=100 restores Go's default; GOMEMLIMIT caps the heap whatever GOGC
// says.
const defaultGCPercent = 200

// serveCmd holds the flags of `sluice serve`. Defaults are in the tags.
type serveCmd struct {
	HTTPAddr                string        `name:"http-addr" default:"127.0.0.1:7070" help:"Address of the HTTP API (HTTP/1.1 and h2c; with --tls-cert, TLS with HTTP/1.1 and HTTP/2). Port 0 picks a free port (logged)."`
	Region                  string        `default:"local" help:"Name of this node's region."`
	Origin                  string        `enum:"memory,redis,cluster," default:"" help:"Regional origin: memory, redis or cluster (default: redis when --redis-url is set, else memory)."`
	RedisURL                string        `name:"redis-url" help:"Redis URL of the regional origin and, unless --store or --mysql-dsn says otherwise, of the store: redis://[user:pass@]host:port[/db], rediss://… (TLS) or unix:///path.sock; a Redis Cluster with ?addr=host2:port2 (more seeds) or ?cluster=true; Sentinel with ?master_name=NAME (host:port is a sentinel)."`
	MySQLDSN                string        `name:"mysql-dsn" help:"MySQL/MariaDB DSN (go-sql-driver format): turns on the global layer (regions converge through it) and stores namespaces and overrides there."`
	Store                   string        `enum:"sqlite,redis,mysql," default:"" help:"Store of namespaces and overrides: sqlite (per node, in --data-dir), redis (--redis-url) or mysql (--mysql-dsn). Default: mysql when --mysql-dsn is set, else redis when --redis-url is set, else sqlite."`
	RootKey                 []string      `name:"root-key" env:"SLUICE_ROOT_KEYS" sep:"," placeholder:"KEY:WORKSPACE" help:"Root key (at least 16 bytes) and its workspace, split at the last ':'. Repeatable; SLUICE_ROOT_KEYS is comma-separated. Prefer --root-key-file, SLUICE_ROOT_KEYS or --root-key-sha256: a flag is visible to every local user (ps). None (and no --root-key-sha256 or --root-key-file): any bearer token is workspace 'default', loopback only."`
	RootKeyFile             string        `name:"root-key-file" type:"path" placeholder:"FILE" help:"File of root keys, one KEY:WORKSPACE per line as --root-key takes them; blank lines and lines starting with # are skipped."`
	RootKeySHA256           []string      `name:"root-key-sha256" env:"SLUICE_ROOT_KEY_SHA256S" sep:"," placeholder:"HEX:WORKSPACE" help:"SHA-256 of a root key (64 hex digits, printed by 'sluice hash-key') and its workspace: the configuration need not hold the key. Repeatable; SLUICE_ROOT_KEY_SHA256S is comma-separated."`
	DataDir                 string        `name:"data-dir" default:"./sluice-data" help:"Folder of the SQLite database sluice.db, the store with --store sqlite (created 0700 if missing)."`
	RLSConfig               string        `name:"rls-config" placeholder:"PATH" help:"File or folder of envoyproxy/ratelimit YAML: serves Envoy RLS (gRPC, h2c) on --http-addr, or on --rls-addr. SIGHUP reloads it."`
	LogFormat               string        `name:"log-format" enum:"text,json" default:"text" help:"Log format: text or json."`
	LogLevel                string        `name:"log-level" enum:"debug,info,warn,error" default:"info" help:"Minimum log level."`
	ShutdownTimeout         time.Duration `name:"shutdown-timeout" default:"15s" help:"How long a graceful shutdown waits for in-flight requests; those still running then are cut (they decide locally at once) before the final flush."`
	OverrideRefresh         time.Duration `name:"override-refresh" default:"2s" help:"How often the whole store of namespaces and overrides is re-read: the safety net for a missed change (the Redis store announces changes by pub/sub, the MySQL store is polled every 200ms)."`
	OTelEndpoint            string        `name:"otel-endpoint" placeholder:"URL" help:"OpenTelemetry collector (OTLP/HTTP) for traces, e.g. http://127.0.0.1:4318; /v1/traces is added when the URL has no path. Tracing is off unless this or OTEL_EXPORTER_OTLP_ENDPOINT is set."`
	OTelSampleRatio         float64       `name:"otel-sample-ratio" default:"1" help:"Share of new traces that are sampled, 0 to 1. A caller's sampled traceparent is always followed."`
	MaxNamespaces           int           `name:"max-namespaces" default:"10000" help:"Most namespaces one workspace may have; a call that would create one more gets a 403."`
	MaxOverrides            int           `name:"max-overrides" default:"10000" help:"Most overrides one namespace may have, in every store; a setOverride that would add one more gets a 403."`
	MaxCounters             int           `name:"max-counters" default:"5000000" help:"Most window cells held in memory (about 230 bytes each; a counter holds one or two); past it cells are evicted from the workspaces over their share, least recently used first, cells in strict mode or not yet replayed to the origin last."`
	MaxCountersPerWorkspace int           `name:"max-counters-per-workspace" default:"0" help:"Most window cells one workspace (or Envoy RLS domain) may hold; 0: its fair share of --max-counters (90% of it divided by the workspaces holding cells). When memory is full, cells are evicted only from workspaces over their share."`
	MaxConns                int           `name:"max-conns" default:"10000" help:"Most connections open at once on --http-addr (the API, the cluster's peer RPC and, without --rls-addr, Envoy RLS); one more is closed at accept and counted in sluice_http_connections_rejected_total. An idle h2c connection costs about 33 KB (10,000: some 330 MB)."`
	GlobalFlags             `embed:""`
	ClusterFlags            `embed:""`
	TLSFlags                `embed:""`
	AdminFlags              `embed:""`
	RLSFlags                `embed:""`
	AnalyticsFlags          `embed:""`

	argv map[string]bool // the flags set on the command line, by AfterApply

	// firstRequest is how long a connection to --http-addr or --rls-addr
	// may stay open before it starts a request; zero: firstRequestTimeout.
	firstRequest time.Duration
}

// Validate checks the flags that kong's tags cannot. It reports every
// problem it finds, not only the first: the error is a configErrors.
func (c *serveCmd) Validate() error {
	var errs configErrors
	for _, err := range []error{
		c.validateAddrs(),
		c.GlobalFlags.validate(),
		c.TLSFlags.validate(),
		c.AdminFlags.validate(),
		c.RLSFlags.validate(c.RLSConfig, c.TLSFlags),
		c.validateOrigin(),
		c.validateLimits(),
		c.validateStore(),
		c.validateTracing(),
		c.AnalyticsFlags.validate(),
	} {
		var more configErrors
		switch {
		case err == nil:
		case errors.As(err, &more):
			errs = append(errs, more...)
		default:
			errs = append(errs, err)
		}
	}
	if _, err := c.rootKeys(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// configErrors is every problem found in a configuration, one per flag
// at most for each check.
type configErrors []error

// Error joins the problems, one per line.
func (e configErrors) Error() string { return errors.Join(e...).Error() }

// Unwrap returns the problems, for errors.Is and errors.As.
func (e configErrors) Unwrap() []error { return e }

// join returns nil for no error and a configErrors otherwise.
func join(errs ...error) error {
	var out configErrors
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// validateAddrs checks --http-addr and --region.
func (c *serveCmd) validateAddrs() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		errs = append(errs, fmt.Errorf("--http-addr %q: %w", c.HTTPAddr, err))
	}
	if c.Region == "" {
		errs = append(errs, errors.New("--region must not be empty"))
	}
	return join(errs...)
}

// validateOrigin checks --redis-url and --origin.
func (c *serveCmd) validateOrigin() error {
	var errs []error
	if c.RedisURL != "" {
		u, err := url.Parse(c.RedisURL)
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") || (u.Host == "" && u.Scheme != "unix") {
			errs = append(errs, fmt.Errorf("--redis-url %q: want redis://[user:pass@]host:port[/db], rediss://… or unix://…", c.RedisURL))
		}
	}
	if c.Origin == "redis" && c.RedisURL == "" {
		errs = append(errs, errors.New("--origin redis needs --redis-url"))
	}
	return join(errs...)
}

// validateLimits checks the caps and timings.
func (c *serveCmd) validateLimits() error {
	var errs []error
	check := func(bad bool, msg string) {
		if bad {
			errs = append(errs, errors.New(msg))
		}
	}
	check(c.MaxCounters < 0, "--max-counters must not be negative")
	check(c.MaxCountersPerWorkspace < 0, "--max-counters-per-workspace must not be negative")
	check(c.MaxNamespaces < 0, "--max-namespaces must not be negative")
	check(c.MaxConns < 1, "--max-conns must be at least 1")
	check(c.MaxOverrides < 0, "--max-overrides must not be negative")
	check(c.ShutdownTimeout <= 0, "--shutdown-timeout must be positive")
	check(c.OverrideRefresh <= 0, "--override-refresh must be positive")
	return join(errs...)
}

// validateStore checks that the store chosen has what it needs.
func (c *serveCmd) validateStore() error {
	switch {
	case c.Store == "redis" && c.RedisURL == "":
		return errors.New("--store redis needs --redis-url")
	case c.Store == "mysql" && c.MySQLDSN == "":
		return errors.New("--store mysql needs --mysql-dsn")
	case c.storeKind() == "sqlite" && c.DataDir == "":
		return errors.New("--data-dir must not be empty")
	}
	return nil
}

// validateTracing checks --otel-endpoint and --otel-sample-ratio.
func (c *serveCmd) validateTracing() error {
	var errs []error
	if c.OTelEndpoint != "" {
		if _, err := tracesURL(c.OTelEndpoint); err != nil {
			errs = append(errs, err)
		}
	}
	if !(c.OTelSampleRatio >= 0 && c.OTelSampleRatio <= 1) {
		errs = append(errs, fmt.Errorf("--otel-sample-ratio %v: want a number from 0 to 1", c.OTelSampleRatio))
	}
	return join(errs...)
}

func (c *serveCmd) rootKeys() ([]server.RootKey, error) {
	var keys []server.RootKey
	for _, s := range c.RootKey {
		if strings.TrimSpace(s) == "" {
			continue
		}
		k, err := server.ParseRootKey(s)
		if err != nil {
			return nil, fmt.Errorf("--root-key: %w", err)
		}
		keys = append(keys, k)
	}
	for _, s := range c.RootKeySHA256 {
		if strings.TrimSpace(s) == "" {
			continue
		}
		k, err := server.ParseHashedRootKey(s)
		if err != nil {
			return nil, fmt.Errorf("--root-key-sha256: %w", err)
		}
		keys = append(keys, k)
	}
	if c.RootKeyFile != "" {
		fromFile, err := readRootKeyFile(c.RootKeyFile)
		if err != nil {
			return nil, err
		}
		keys = append(keys, fromFile...)
	}
	return keys, nil
}

func (c *serveCmd) logger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// isLoopback reports whether addr's host is a loopback IP or "localhost".
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loadCertificates loads the TLS certificates when TLS is on (nil when it
// is off), reloaded on SIGHUP through hup; the cluster origin calls its
// peers with them too.
func (c *serveCmd) loadCertificates(log *slog.Logger, obs *observability, hup *hangup) (*tlsCertificates, error) {
	if !c.tlsEnabled() {
		return nil, nil
	}
	certs, err := newTLSCertificates(c.TLSFlags, log, obs.reg)
	if err != nil {
		return nil, err
	}
	hup.add(certs.reload)
	c.certs = certs
	return certs, nil
}

// Run serves until SIGINT or SIGTERM, then shuts down gracefully: stop
// accepting, drain in-flight requests (up to --shutdown-timeout), cut those
// still running and wait for their handlers (up to cutGrace), close the API,
// close the limiter (flushing pending replays, which no handler can add to
// any more), stop the override cache, close the store. Each step of
// start-up registers its release in a cleanup stack that runs in reverse
// order, on a failed start as on shutdown.
func (c *serveCmd) Run(ctx context.Context) error {
	log := c.logger(os.Stderr)
	c.warnSecretsInArgv(log)
	gcPercent := setGCPercent()
	keys, err := c.checkRootKeys(log)
	if err != nil {
		return err
	}
	origin, err := c.originKind()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var cl cleanup
	defer cl.run()

	obs, err := c.newObservability(ctx, log, &cl)
	if err != nil {
		return err
	}
	var console lateHandler
	ready, err := c.startAdmin(ctx, obs.reg, &console, log, &cl)
	if err != nil {
		return err
	}
	var hup hangup
	certs, err := c.loadCertificates(log, &obs, &hup)
	if err != nil {
		return err
	}
	catalog, err := c.newCatalog(ctx, log, obs.metrics, &cl)
	if err != nil {
		return err
	}
	limiterCfg := sluice.Config{Region: c.Region, Logger: log, Observer: obs.metrics, MaxCounters: c.MaxCounters, MaxCountersPerWorkspace: c.MaxCountersPerWorkspace}
	if limiterCfg.Origin, err = c.newOrigin(origin, log, obs, &cl); err != nil {
		return err
	}
	if ping, release := c.originPing(origin); ping != nil {
		ready.probe(ctx, "origin", ping, release, log)
	}
	if err := c.newGlobal(ctx, &limiterCfg, log, obs.reg, &cl); err != nil {
		return err
	}
	limiter, err := newLimiter(limiterCfg, log, &cl)
	if err != nil {
		return err
	}
	rec, err := c.newAnalytics(log, obs.reg, &cl)
	if err != nil {
		return err
	}
	api, err := c.newAPI(limiter, catalog, keys, rec, log, obs, &hup, &cl)
	if err != nil {
		return err
	}
	console.set(api.ConsoleHandler())
	ln, err := c.listen(ctx, limiter, obs.reg, log, &cl)
	if err != nil {
		return err
	}
	srv, reqs, serveErr := serveAPI(api.Handler(), ln, certs, log)
	hup.listen(ctx, log, &cl)
	ready.listen()
	log.Info("listening", "addr", ln.Addr().String(), "tls", certs != nil, "region", c.Region, "origin", origin, "redis", redactURL(c.RedisURL), "store", c.storeKind(), "root_keys", len(keys), "tracing", obs.tracer != nil, "gogc", gcPercent, "version", version)

	select {
	case err := <-serveErr:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	stop() // a second signal kills the process the default way
	drain(srv, reqs, serveErr, c.ShutdownTimeout, cutGrace, log)
	cl.run()
	log.Info("stopped")
	return nil
}

// listen listens on --http-addr, capped at --max-conns, and joins the
// cluster once the peer RPC can be reached there.
func (c *serveCmd) listen(ctx context.Context, limiter *sluice.Limiter, reg prometheus.Registerer, log *slog.Logger, cl *cleanup) (net.Listener, error) {
	ln, err := net.Listen("tcp", c.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", c.HTTPAddr, err)
	}
	if err := c.joinCluster(ctx, ln.Addr().String(), log, cl); err != nil {
		_ = ln.Close()
		return nil, err
	}
	return limitConns(ln, apiListener, c.MaxConns, c.connFirstRequest(), reg, log), nil
}

// connFirstRequest returns how long a connection may stay open before
// it starts a request.
func (c *serveCmd) connFirstRequest() time.Duration {
	if c.firstRequest > 0 {
		return c.firstRequest
	}
	return firstRequestTimeout
}

// cleanup is the stack of releases of start-up; run calls them in reverse
// order of registration, once.
type cleanup []func()

func (cl *cleanup) add(f func()) { *cl = append(*cl, f) }

func (cl *cleanup) run() {
	for i := len(*cl) - 1; i >= 0; i-- {
		(*cl)[i]()
	}
	*cl = nil
}

// setGCPercent applies defaultGCPercent unless GOGC is set, and returns the
// GC target in force for the start-up log.
func setGCPercent() string {
	if gc := os.Getenv("GOGC"); gc != "" {
		return gc
	}
	debug.SetGCPercent(defaultGCPercent)
	return strconv.Itoa(defaultGCPercent)
}

// checkRootKeys returns the configured root keys. With none, it refuses a
// non-loopback address and warns that any bearer token is accepted.
func (c *serveCmd) checkRootKeys(log *slog.Logger) ([]server.RootKey, error) {
	keys, err := c.rootKeys()
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		if !isLoopback(c.HTTPAddr) {
			return nil, fmt.Errorf("no root key configured and --http-addr %s is not a loopback address: set --root-key-sha256 HEX:WORKSPACE, --root-key-file FILE or SLUICE_ROOT_KEYS=KEY:WORKSPACE to listen there", c.HTTPAddr)
		}
		log.Warn("no root key configured: any bearer token is accepted as workspace \"default\" (allowed because the server listens on loopback only)", "addr", c.HTTPAddr)
	}
	if !isLoopback(c.HTTPAddr) && !c.tlsEnabled() {
		log.Warn("TLS is off on a non-loopback address: root keys travel in the clear unless a TLS-terminating proxy or mesh is in front; set --tls-cert and --tls-key to serve TLS", "addr", c.HTTPAddr)
	}
	return keys, nil
}

// originKind returns the regional origin to use: --origin, else redis when
// --redis-url is set, else memory.
func (c *serveCmd) originKind() (string, error) {
	switch {
	case c.Origin == "cluster":
		return "cluster", c.ClusterFlags.validate(c.HTTPAddr)
	case c.Origin != "":
		return c.Origin, nil
	case c.RedisURL != "":
		return "redis", nil
	default:
		return "memory", nil
	}
}

// observability is the server's metrics registry and tracer provider.
type observability struct {
	reg     *prometheus.Registry
	metrics *server.Metrics
	redis   *redisMetrics
	rls     *rlsMetrics
	tracer  trace.TracerProvider // nil when tracing is off
}

// newObservability builds the metrics registry and, when configured, the
// tracer provider, whose shutdown (exporting the last spans) is registered
// first so that it runs last: after the limiter's final flush.
func (c *serveCmd) newObservability(ctx context.Context, log *slog.Logger, cl *cleanup) (observability, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	obs := observability{reg: reg, metrics: server.NewMetrics(reg), redis: newRedisMetrics(reg), rls: newRLSMetrics(reg)}
	tp, err := c.newTracerProvider(ctx, log)
	if err != nil {
		return obs, err
	}
	obs.tracer = tracerProvider(tp)
	if tp != nil {
		cl.add(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(ctx); err != nil {
				log.Warn("tracing: exporting the last spans failed", "err", err)
			}
		})
	}
	return obs, nil
}

// newCatalog opens the store and loads its namespaces and overrides into the
// cache that the API reads.
func (c *serveCmd) newCatalog(ctx context.Context, log *slog.Logger, metrics *server.Metrics, cl *cleanup) (*store.Cache, error) {
	st, err := c.openStore(ctx, log, cl)
	if err != nil {
		return nil, err
	}
	cl.add(func() {
		if err := st.Close(); err != nil {
			log.Error("closing the store", "err", err)
		}
	})
	cacheCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	catalog, err := store.NewCache(cacheCtx, store.CacheConfig{
		Store:     st,
		Refresh:   c.OverrideRefresh,
		Logger:    log,
		OnRefresh: metrics.StoreRefreshed,
	})
	if err != nil {
		return nil, err
	}
	cl.add(func() {
		if err := catalog.Close(); err != nil {
			log.Error("stopping the override cache", "err", err)
		}
	})
	return catalog, nil
}

// newOrigin connects the regional origin of kind; it returns nil for the
// limiter's embedded memory origin.
func (c *serveCmd) newOrigin(kind string, log *slog.Logger, obs observability, cl *cleanup) (origin.Origin, error) {
	if kind == "cluster" {
		return c.newClusterOrigin(log, obs.reg, cl)
	}
	if kind != "redis" {
		return nil, nil
	}
	client, err := redis.NewClient(c.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("--redis-url: %w", err)
	}
	cl.add(func() { _ = client.Close() })
	o, err := redis.New(redis.Config{Client: client, Region: c.Region, Logger: log, Observer: obs.redis, TracerProvider: obs.tracer})
	if err != nil {
		return nil, fmt.Errorf("--redis-url: %w", err)
	}
	cl.add(func() { _ = o.Close() })
	return o, nil
}

// newLimiter builds the limiter; its Close, which flushes pending replays to
// the origin, runs before the origin and the store close.
func newLimiter(cfg sluice.Config, log *slog.Logger, cl *cleanup) (*sluice.Limiter, error) {
	limiter, err := sluice.New(cfg)
	if err != nil {
		return nil, err
	}
	cl.add(func() {
		if err := limiter.Close(); err != nil {
			log.Error("closing the limiter", "err", err)
		}
	})
	return limiter, nil
}

// newAPI builds the HTTP API and, with --rls-config, the Envoy RLS service
// with its SIGHUP reload. Its Close, which waits for the namespace
// creations in flight, runs before the limiter and the catalog close. The
// metrics are served by the admin listener, not by the API.
func (c *serveCmd) newAPI(limiter *sluice.Limiter, catalog *store.Cache, keys []server.RootKey, recorder server.Analytics, log *slog.Logger, obs observability, hup *hangup, cl *cleanup) (*server.Server, error) {
	rlsService, services, err := c.newRLS(limiter, recorder, log, obs, hup, cl)
	if err != nil {
		return nil, err
	}
	if rlsService != nil {
		hup.add(c.reloadRLS(rlsService, log, obs.rls))
	}
	api, err := server.New(server.Config{
		Limiter:       limiter,
		Catalog:       catalog,
		RootKeys:      keys,
		Logger:        log,
		Metrics:       obs.metrics,
		Services:      c.clusterServices(services),
		MaxNamespaces: c.MaxNamespaces,
		Analytics:     recorder,

		TracerProvider: obs.tracer,
	})
	if err != nil {
		return nil, err
	}
	cl.add(func() { _ = api.Close() }) // before the limiter and the catalog close
	return api, nil
}

// idleTimeout is how long a connection, HTTP/1 or HTTP/2 (h2c or over
// TLS), is kept open without a request in flight after its last one.
const idleTimeout = 120 * time.Second

// newHTTPServer returns the HTTP server of h: HTTP/1.1 and h2c, with
// timeouts that bound slow clients. A connection that starts no request
// within readHeaderTimeout is closed, whatever its protocol, when it comes
// from a connLimiter (see serveAPI).
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &protocols,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// storeKind returns the store of namespaces and overrides to use: --store,
// else mysql when --mysql-dsn is set, else redis when --redis-url is set,
// else sqlite.
func (c *serveCmd) storeKind() string {
	switch {
	case c.Store != "":
		return c.Store
	case c.MySQLDSN != "":
		return "mysql"
	case c.RedisURL != "":
		return "redis"
	default:
		return "sqlite"
	}
}

// openStore opens the store of storeKind and logs which it is and whether
// every node sharing the origin shares it; a per-node store beside a shared
// origin gets a warning. The Redis store has its own client (its own pool
// and its subscription's connection), closed at cleanup after the store.
func (c *serveCmd) openStore(ctx context.Context, log *slog.Logger, cl *cleanup) (store.Store, error) {
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch c.storeKind() {
	case "mysql":
		log.Info("store: MySQL, shared by every node on this database; other nodes' changes are seen within about 200ms", "shared", true)
		return mysql.Open(openCtx, mysql.Config{DSN: c.MySQLDSN, Logger: log, MaxOverrides: c.MaxOverrides})
	case "redis":
		log.Info("store: Redis, shared by every node on this Redis; other nodes' changes are announced by pub/sub", "shared", true, "redis", redactURL(c.RedisURL))
		client, err := redis.NewClient(c.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		cl.add(func() { _ = client.Close() })
		st, err := storeredis.New(storeredis.Config{Client: client, Logger: log, MaxNamespaces: c.MaxNamespaces, MaxOverrides: c.MaxOverrides})
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		return st, nil
	default:
		log.Info("store: SQLite, this node only", "shared", false, "dir", c.DataDir)
		if c.RedisURL != "" {
			log.Warn("store: namespaces and overrides are kept per node (SQLite) while counts are shared through --redis-url: an override set through this node applies on this node only, so overrides will differ between nodes; use --store redis (or --mysql-dsn) to share them")
		}
		return sqlite.Open(openCtx, sqlite.Config{Dir: c.DataDir, MaxOverrides: c.MaxOverrides})
	}
}

// redactURL hides the password of a URL for logs.
func redactURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
