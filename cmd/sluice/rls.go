package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/server/rls"
)

// newRLS loads --rls-config and builds the Envoy RLS service and its route;
// it returns nil services when the flag is unset. An invalid file stops the
// start with the loader's error, which names the file and the problem.
func (c *serveCmd) newRLS(limiter rls.Limiter, log *slog.Logger, metrics *rlsMetrics) (*rls.Service, map[string]http.Handler, error) {
	if c.RLSConfig == "" {
		return nil, nil, nil
	}
	rules, err := rls.Load(c.RLSConfig)
	if err != nil {
		return nil, nil, fmt.Errorf("--rls-config: %w", err)
	}
	svc, err := rls.New(rls.Config{Limiter: limiter, Domains: rules, Logger: log, Observer: metrics})
	if err != nil {
		return nil, nil, err
	}
	path, h := svc.Handler()
	log.Info("envoy rls: serving", "path", path, "config", c.RLSConfig, "domains", rules.Domains())
	return svc, map[string]http.Handler{path: h}, nil
}

// reloadOnHangup reloads --rls-config into svc on every SIGHUP until ctx
// ends; a file that fails to load is logged and the rules in force stay. The
// returned function stops the reloader and waits for it; it is idempotent.
func (c *serveCmd) reloadOnHangup(ctx context.Context, svc *rls.Service, log *slog.Logger, metrics *rlsMetrics) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				rules, err := rls.Load(c.RLSConfig)
				metrics.reloaded(err)
				if err != nil {
					log.Error("envoy rls: reload failed; keeping the rules in force", "config", c.RLSConfig, "err", err)
					continue
				}
				svc.SetRuleset(rules)
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}
