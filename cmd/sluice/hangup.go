package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// hangup is the one SIGHUP loop of `sluice serve`: every signal runs the
// reloads registered with add (the Envoy RLS rules, the TLS certificate), in
// order of registration. Without any, a SIGHUP is logged and ignored, so
// that a reload sent by habit never stops the server.
type hangup struct{ reloads []func() }

// add registers a reload; call it before listen.
func (h *hangup) add(reload func()) { h.reloads = append(h.reloads, reload) }

// listen runs the reloads on every SIGHUP until ctx ends, and registers in
// cl the loop's stop, which waits for a reload in progress.
func (h *hangup) listen(ctx context.Context, log *slog.Logger, cl *cleanup) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				if len(h.reloads) == 0 {
					log.Info("SIGHUP: nothing to reload (no --rls-config, no --tls-cert)")
				}
				for _, reload := range h.reloads {
					reload()
				}
			}
		}
	}()
	cl.add(func() {
		signal.Stop(sig)
		cancel()
		<-done
	})
}
