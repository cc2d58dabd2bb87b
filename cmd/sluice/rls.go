package main

import (
	"fmt"
	"log/slog"
	"net/http"

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

// reloadRLS returns the reload of --rls-config into svc that SIGHUP runs: a
// file that fails to load is logged and the rules in force stay.
func (c *serveCmd) reloadRLS(svc *rls.Service, log *slog.Logger, metrics *rlsMetrics) func() {
	return func() {
		rules, err := rls.Load(c.RLSConfig)
		metrics.reloaded(err)
		if err != nil {
			log.Error("envoy rls: reload failed; keeping the rules in force", "config", c.RLSConfig, "err", err)
			return
		}
		svc.SetRuleset(rules)
	}
}
