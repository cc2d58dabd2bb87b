// Package flight runs one call per key at a time and lets every caller that
// asks for the same key meanwhile wait for that call instead of starting its
// own (single flight).
//
// Unlike golang.org/x/sync/singleflight, the call runs on a goroutine of its
// own and each caller waits with its own context: a caller that gives up
// returns at once and never cancels the call the others wait for.
package flight

import (
	"context"
	"sync"
)

// Group is a set of calls in flight, by key. The zero value is ready to use.
// A Group must not be copied after first use.
type Group[K comparable] struct {
	mu    sync.Mutex
	calls map[K]chan struct{}
	wg    sync.WaitGroup
}

// Do starts fn for key unless a call for key is in flight already, then
// waits until that call has returned or ctx is done. It reports whether the
// call returned (false: ctx ended first; the call goes on). fn is not given
// ctx: it must bound its own work.
func (g *Group[K]) Do(ctx context.Context, key K, fn func()) bool {
	g.mu.Lock()
	done, ok := g.calls[key]
	if !ok {
		if g.calls == nil {
			g.calls = make(map[K]chan struct{})
		}
		done = make(chan struct{})
		g.calls[key] = done
		g.wg.Go(func() {
			defer func() {
				g.mu.Lock()
				delete(g.calls, key)
				g.mu.Unlock()
				close(done)
			}()
			fn()
		})
	}
	g.mu.Unlock()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// Wait waits until every call started so far has returned.
func (g *Group[K]) Wait() { g.wg.Wait() }
