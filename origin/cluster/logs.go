package cluster

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// The rate limit of each log source that traffic from outside can drive
// (garbage packets to the gossip port, refused peer calls): a burst of
// logBurst lines, then one line per logEvery.
const (
	logBurst = 10
	logEvery = time.Second
)

// logGate writes the log lines of one source at a bounded rate (a token
// bucket of logBurst lines refilled at one per logEvery), so that a flood
// of spoofed packets or calls cannot flood the log. A line over the rate
// is counted ([Observer.LogDropped]) and not written; the next line
// written carries the number dropped since the previous one ("dropped").
// Lines below the logger's level are neither written nor counted.
type logGate struct {
	log    *slog.Logger
	source string
	obs    Observer
	now    func() time.Time

	mu      sync.Mutex
	tokens  float64
	last    time.Time // of the last refill
	dropped int64     // lines dropped since the last one written
}

func newLogGate(log *slog.Logger, source string, obs Observer) *logGate {
	return &logGate{log: log, source: source, obs: obs, now: time.Now, tokens: logBurst}
}

// take spends a token if there is one, and returns the number of lines
// dropped since the last one written; ok is false when the line must be
// dropped.
func (g *logGate) take() (dropped int64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if !g.last.IsZero() {
		g.tokens = min(logBurst, g.tokens+float64(now.Sub(g.last))/float64(logEvery))
	}
	g.last = now
	if g.tokens < 1 {
		g.dropped++
		return 0, false
	}
	g.tokens--
	dropped, g.dropped = g.dropped, 0
	return dropped, true
}

// write logs msg at level unless the rate limit drops it.
func (g *logGate) write(level slog.Level, msg string, args ...any) {
	ctx := context.Background()
	if !g.log.Enabled(ctx, level) {
		return
	}
	dropped, ok := g.take()
	if !ok {
		g.obs.LogDropped(g.source)
		return
	}
	if dropped > 0 {
		args = append(args, "dropped", dropped)
	}
	g.log.Log(ctx, level, msg, args...)
}

// warn logs msg at warning level unless the rate limit drops it.
func (g *logGate) warn(msg string, args ...any) { g.write(slog.LevelWarn, msg, args...) }
