package redis

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestNewClientRetries checks the retry options of the clients NewClient
// builds: none unless the URL asks for them.
func TestNewClientRetries(t *testing.T) {
	tests := []struct {
		url string
		// As go-redis reports them: a Client's -1 (none) reads as 0; a
		// ClusterClient keeps -1 for its nodes (it follows redirections,
		// max_redirects, instead).
		maxRetries, dialerRetries int
	}{
		{"redis://127.0.0.1:6390/0", 0, 1},
		{"redis://127.0.0.1:6390/0?max_retries=2", 2, 1},
		{"redis://127.0.0.1:6390?master_name=m", 0, 1},
		{"redis://127.0.0.1:6390?master_name=m&max_retries=2&dialer_retries=3", 2, 3},
		{"redis://127.0.0.1:6390?cluster=true", -1, 1},
		{"redis://127.0.0.1:6390?cluster=true&dialer_retries=3", -1, 3},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			c, err := NewClient(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var maxRetries, dialerRetries int
			switch c := c.(type) {
			case *goredis.Client:
				maxRetries, dialerRetries = c.Options().MaxRetries, c.Options().DialerRetries
			case *goredis.ClusterClient:
				maxRetries, dialerRetries = c.Options().MaxRetries, c.Options().DialerRetries
			default:
				t.Fatalf("unexpected client %T", c)
			}
			if maxRetries != tc.maxRetries || dialerRetries != tc.dialerRetries {
				t.Fatalf("MaxRetries %d, DialerRetries %d; want %d, %d", maxRetries, dialerRetries, tc.maxRetries, tc.dialerRetries)
			}
		})
	}
}

// TestNewClientSendsACommandOnce sends one command to a server that hangs up
// on every connection: the client gives up after one connection instead of
// retrying the command (go-redis retries a lost connection 3 times by
// default, with backoff, which made every call to a dead Redis wait out its
// deadline).
func TestNewClientSendsACommandOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			_ = c.Close()
		}
	}()
	c, err := NewClient("redis://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING to a server that hangs up succeeded")
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("one PING opened %d connections, want 1 (no retries)", n)
	}
}
