package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
)

// Watch runs w.Watch until the test ends and returns a channel that
// receives a value per changed call (calls beyond its buffer of 64 are
// dropped). At cleanup it cancels Watch, waits for it and fails the test
// if it returned an error.
func Watch(t testing.TB, w store.Watcher) <-chan struct{} {
	t.Helper()
	ch := make(chan struct{}, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Watch(ctx, func() {
			select {
			case ch <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch returned %v after its context was cancelled", err)
		}
	})
	return ch
}

// WaitChanged fails t unless a change is reported on ch within d; what
// names the change in the failure.
func WaitChanged(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("no change reported within %v: %s", d, what)
	}
}

// Drain empties ch of the reports received so far.
func Drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
