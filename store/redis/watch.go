package redis

import (
	"context"
	"errors"
	"net"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Watch implements store.Watcher: it subscribes to the store's channel and
// calls changed for every message, and also every time the subscription is
// (re)established, because messages published while it was down are lost.
// A lost or silent connection (no answer to a ping within the health
// interval) is dropped and the subscription retried with exponential
// backoff (50 ms to 2 s). Watch returns nil when ctx is done.
func (s *Store) Watch(ctx context.Context, changed func()) error {
	backoff := s.minBackoff
	failures := 0 // consecutive failed subscriptions
	subscribed := func() {
		if failures > 0 {
			s.cfg.Logger.Info("store/redis: change subscription restored")
		}
		backoff, failures = s.minBackoff, 0
		s.markUp() // Redis answers again: writes need not wait for a probe
		changed()
	}
	for {
		err := s.watchOnce(ctx, subscribed, changed)
		if ctx.Err() != nil {
			return nil
		}
		failures++
		if failures == 1 {
			s.cfg.Logger.Warn("store/redis: change subscription lost; resubscribing (changes are seen on the periodic refresh meanwhile)", "err", err)
		} else {
			s.cfg.Logger.Debug("store/redis: resubscribing failed", "err", err, "attempt", failures)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, s.maxBackoff)
	}
}

// watchOnce runs one subscription until it fails or ctx is done, calling
// subscribed when Redis confirms the subscription and changed for every
// message.
func (s *Store) watchOnce(ctx context.Context, subscribed, changed func()) error {
	ps := s.client.Subscribe(ctx, s.channel)
	defer ps.Close()
	// Close unblocks a Receive waiting on the socket as soon as ctx is done.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, s.health)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if isTimeout(err) && !pinged {
				pinged = true
				if err := ps.Ping(ctx); err != nil {
					return err
				}
				continue
			}
			return err
		}
		pinged = false
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				subscribed()
			}
		case *goredis.Message:
			changed()
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
