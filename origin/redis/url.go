package redis

import (
	"errors"
	"fmt"
	"net/url"

	goredis "github.com/redis/go-redis/v9"
)

// NewClient builds a Redis client from a URL, as given to --redis-url:
//
//	redis://[user:password@]host[:port][/db][?option=value...]   single node
//	rediss://...                                                 the same over TLS
//	unix://[user:password@]/path/to/redis.sock[?db=N]            single node, Unix socket
//	redis://host:port?addr=host2:port2&addr=host3:port3          Redis Cluster (seed nodes)
//	redis://host:port?cluster=true                               Redis Cluster with one seed
//	redis://host:port?master_name=NAME[&addr=sentinel2:port]     Sentinel (host:port is a sentinel)
//
// Query options are go-redis option names in snake case (dial_timeout,
// pool_size, max_retries, ...). The client always has ContextTimeoutEnabled
// set, so that per-call deadlines bound socket I/O. Unless the URL says
// otherwise it does not retry: a failed command is not sent again
// (max_retries, default -1: none) and a refused connection is not dialed
// again (dialer_retries on cluster and sentinel URLs, default 1: one
// attempt). go-redis's own defaults (3 command retries with backoff, 5 dial
// attempts 100ms apart) would make every call to a Redis that refuses
// connections wait out its whole deadline instead of failing at once. Every
// caller in Sluice retries on its own schedule behind a circuit breaker:
// the limiter decides locally and replays its increments later. A cluster
// client still follows MOVED and ASK redirections (max_redirects).
//
// The caller owns the returned client and must Close it; [Origin.Close] does
// not. Errors never echo the URL, which may hold a password.
func NewClient(rawURL string) (goredis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("redis: invalid URL: %w", err)
	}
	q := u.Query()
	switch {
	case q.Has("master_name"):
		opts, err := goredis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis: invalid sentinel URL: %w", redact(err))
		}
		opts.ContextTimeoutEnabled = true
		opts.MaxRetries = option(q, "max_retries", opts.MaxRetries, noRetries)
		opts.DialerRetries = option(q, "dialer_retries", opts.DialerRetries, oneDial)
		return goredis.NewFailoverClient(opts), nil
	case q.Has("addr") || q.Has("cluster"):
		if q.Has("cluster") {
			if v := q.Get("cluster"); v != "true" && v != "1" {
				return nil, fmt.Errorf("redis: invalid URL: cluster=%q (want true)", v)
			}
			q.Del("cluster")
			u.RawQuery = q.Encode()
		}
		opts, err := goredis.ParseClusterURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("redis: invalid cluster URL: %w", redact(err))
		}
		opts.ContextTimeoutEnabled = true
		opts.DialerRetries = option(q, "dialer_retries", opts.DialerRetries, oneDial)
		return goredis.NewClusterClient(opts), nil
	default:
		opts, err := goredis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis: invalid URL: %w", redact(err))
		}
		opts.ContextTimeoutEnabled = true
		opts.MaxRetries = option(q, "max_retries", opts.MaxRetries, noRetries)
		opts.DialerRetries = oneDial // ParseURL has no dialer_retries option
		return goredis.NewClient(opts), nil
	}
}

// The retry options NewClient sets where the URL leaves them unset.
const (
	noRetries = -1 // MaxRetries: go-redis reads -1 as none (0 as its default, 3)
	oneDial   = 1  // DialerRetries: one attempt (0 is go-redis's default, 5)
)

// option returns parsed, the value ParseURL read for the query option name,
// when the URL has it, else def.
func option(q url.Values, name string, parsed, def int) int {
	if q.Has(name) {
		return parsed
	}
	return def
}

// redact strips the URL that a *url.Error carries.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
