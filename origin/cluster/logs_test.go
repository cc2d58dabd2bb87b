package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// droppedLines counts LogDropped calls.
type droppedLines struct {
	NopObserver
	n atomic.Int64
}

func (d *droppedLines) LogDropped(string) { d.n.Add(1) }

// TestLogGate checks the rate limit of a log source: a flood writes a
// burst of logBurst lines, the rest are counted as dropped, the next line
// once time passed carries how many were dropped, and lines below the
// logger's level are neither written nor counted.
func TestLogGate(t *testing.T) {
	var buf bytes.Buffer
	obs := &droppedLines{}
	g := newLogGate(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), LogGossip, obs)
	now := time.Unix(1_800_000_000, 0)
	g.now = func() time.Time { return now }
	const flood = 10_000
	for range flood {
		g.warn("memberlist: [ERR] memberlist: Decrypt packet failed")
	}
	if lines := strings.Count(buf.String(), "\n"); lines != logBurst || obs.n.Load() != flood-logBurst {
		t.Fatalf("a flood of %d lines wrote %d and counted %d dropped, want %d and %d", flood, lines, obs.n.Load(), logBurst, flood-logBurst)
	}
	for range 1000 {
		g.write(slog.LevelDebug, "below the level")
	}
	if obs.n.Load() != flood-logBurst || strings.Contains(buf.String(), "below") {
		t.Fatal("lines below the level were written or counted")
	}
	buf.Reset()
	now = now.Add(logEvery)
	g.warn("after a second")
	g.warn("and one more")
	if out := buf.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, "dropped=9990") {
		t.Fatalf("a second later: %q, want one line carrying dropped=9990", out)
	}
}
