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
// set, so that per-call deadlines bound socket I/O.
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
		return goredis.NewClusterClient(opts), nil
	default:
		opts, err := goredis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis: invalid URL: %w", redact(err))
		}
		opts.ContextTimeoutEnabled = true
		return goredis.NewClient(opts), nil
	}
}

// redact strips the URL that a *url.Error carries.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
