package sluice

import (
	"sync/atomic"
	"time"
)

// rebaseAfter is how long the default clock runs on one wall-clock base
// before it takes a new one.
const rebaseAfter = time.Second

// monoClock is the limiter's default clock for requests without a Time: Unix
// milliseconds from one monotonic clock read against a wall-clock base, half
// the cost of time.Now, which reads both clocks. The base is taken again
// after rebaseAfter, so wall-clock adjustments (NTP) are followed within a
// second; between two bases the clock runs at the monotonic clock's rate.
type monoClock struct {
	base atomic.Pointer[clockBase]
}

type clockBase struct {
	at       time.Time // carries a monotonic reading
	unixNano int64     // at's wall-clock time
}

func newMonoClock() *monoClock {
	c := &monoClock{}
	c.rebase()
	return c
}

func (c *monoClock) rebase() {
	now := time.Now()
	c.base.Store(&clockBase{at: now, unixNano: now.UnixNano()})
}

// nowMilli returns the current Unix time in milliseconds.
func (c *monoClock) nowMilli() int64 {
	b := c.base.Load()
	since := time.Since(b.at) // monotonic only: b.at has a monotonic reading
	if since >= rebaseAfter || since < 0 {
		c.rebase()
		b = c.base.Load()
		since = time.Since(b.at)
	}
	return (b.unixNano + int64(since)) / int64(time.Millisecond)
}
