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
	"errors"
	"fmt"
	"sync"
)

// ErrClosed is returned by Do once its Group is closed: no call was started
// or joined.
var ErrClosed = errors.New("flight: group closed")

// Group is a set of calls in flight, by key. The zero value is ready to use.
// A Group must not be copied after first use. Do, Wait and Close may be
// called concurrently, from any goroutine.
type Group[K comparable] struct {
	mu     sync.Mutex
	calls  map[K]chan struct{} // closed when the call has returned
	closed bool
}

// Do starts fn for key unless a call for key is in flight already, then
// waits until that call has returned or ctx is done. fn is not given ctx:
// it must bound its own work.
//
// Do returns nil once the call has returned. If ctx ends first, it returns
// ctx's error, wrapped, and the call goes on. Once Close has started, Do
// returns ErrClosed at once: it neither starts a call nor joins one.
func (g *Group[K]) Do(ctx context.Context, key K, fn func()) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	done, ok := g.calls[key]
	if !ok {
		done = g.start(key, fn)
	}
	g.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flight: %w", ctx.Err())
	}
}

// start runs fn for key on a goroutine of its own and returns the channel
// closed when fn has returned. g.mu must be held.
func (g *Group[K]) start(key K, fn func()) chan struct{} {
	if g.calls == nil {
		g.calls = make(map[K]chan struct{})
	}
	done := make(chan struct{})
	g.calls[key] = done
	go func() {
		defer func() {
			g.mu.Lock()
			delete(g.calls, key)
			g.mu.Unlock()
			close(done)
		}()
		fn()
	}()
	return done
}

// DoMany is Do for several keys at once: one call of fn for every key of
// keys no call is in flight for (fn is given their indexes in keys, in
// order, a key given twice once), on a goroutine of its own; then it waits
// until that call and the calls in flight for the other keys have all
// returned, or ctx is done. fn is not started when every key is in flight
// already. DoMany returns as Do does; keys may change once it returns.
func (g *Group[K]) DoMany(ctx context.Context, keys []K, fn func(led []int)) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	var (
		done  chan struct{} // the call of the keys led here
		led   []int
		waits []chan struct{}
	)
	for i, k := range keys {
		if d, ok := g.calls[k]; ok {
			if d != done {
				waits = append(waits, d)
			}
			continue
		}
		if done == nil {
			done = make(chan struct{})
			if g.calls == nil {
				g.calls = make(map[K]chan struct{})
			}
		}
		g.calls[k] = done
		led = append(led, i)
	}
	if done != nil {
		waits = append(waits, done)
		ledKeys := make([]K, len(led))
		for j, i := range led {
			ledKeys[j] = keys[i]
		}
		go func() {
			defer func() {
				g.mu.Lock()
				for _, k := range ledKeys {
					delete(g.calls, k)
				}
				g.mu.Unlock()
				close(done)
			}()
			fn(led)
		}()
	}
	g.mu.Unlock()
	for _, d := range waits {
		select {
		case <-d:
		case <-ctx.Done():
			return fmt.Errorf("flight: %w", ctx.Err())
		}
	}
	return nil
}

// Wait waits until every call in flight when it is called has returned.
// Calls that start meanwhile are not waited for.
func (g *Group[K]) Wait() {
	g.mu.Lock()
	pending := make([]chan struct{}, 0, len(g.calls))
	for _, done := range g.calls {
		pending = append(pending, done)
	}
	g.mu.Unlock()
	for _, done := range pending {
		<-done
	}
}

// Close stops Do from starting or joining calls (it returns ErrClosed from
// then on) and waits until every call already started has returned: when
// Close returns, no call of g runs and none will. Close is idempotent, and
// safe to call concurrently with Do and with itself.
func (g *Group[K]) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.Wait()
}
