package analytics

// Buckets of the top lists: a window is its current bucket and the
// topBuckets-1 before it, each summarised by its own sketches and merged
// when asked.
const (
	topBuckets = 7
	// minuteWidth and hourWidth are the bucket widths, in seconds, of the
	// last-minute window (60 to 70 s) and the last-hour window (60 to 70
	// min).
	minuteWidth = 10
	hourWidth   = 600
)

// bucket is one bucket of a top-list window: the sketches of its requests
// and of its denials, allocated on first use and reused.
type bucket struct {
	period   int64 // second / width; -1 before the first event
	requests *sketch
	denied   *sketch
}

// window is a ring of buckets of width seconds each.
type window struct {
	width   int64
	buckets [topBuckets]bucket
}

func newWindow(width int64) window {
	w := window{width: width}
	for i := range w.buckets {
		w.buckets[i].period = -1
	}
	return w
}

// add counts one decision at second t; false if t is older than the window
// holds.
func (w *window) add(t int64, id string, h uint64, passed bool) bool {
	p := t / w.width
	b := &w.buckets[p%topBuckets]
	switch {
	case b.period > p:
		return false
	case b.period < p:
		b.period = p
		if b.requests != nil {
			b.requests.reset()
		}
		if b.denied != nil {
			b.denied.reset()
		}
	}
	if b.requests == nil {
		b.requests = new(sketch)
	}
	b.requests.add(id, h, 1)
	if !passed {
		if b.denied == nil {
			b.denied = new(sketch)
		}
		b.denied.add(id, h, 1)
	}
	return true
}

// sketches returns the requests and denials sketches of the buckets that
// make up the window ending at second now.
func (w *window) sketches(now int64) (requests, denied []*sketch) {
	cur := now / w.width
	for i := range w.buckets {
		b := &w.buckets[i]
		if b.period < 0 || b.period > cur || b.period <= cur-topBuckets {
			continue
		}
		if b.requests != nil {
			requests = append(requests, b.requests)
		}
		if b.denied != nil {
			denied = append(denied, b.denied)
		}
	}
	return requests, denied
}

// space is the analytics of one namespace (or of the namespaces beyond the
// cap, together): the two rings and the two top-list windows.
type space struct {
	seconds ring
	minutes ring
	minute  window
	hour    window
	last    int64 // the latest second with a decision
}

func newSpace() *space {
	return &space{
		seconds: newRing(SecondSlots),
		minutes: newRing(MinuteSlots),
		minute:  newWindow(minuteWidth),
		hour:    newWindow(hourWidth),
	}
}

// add records one decision at second t (t ≥ 0) of identifier id, whose
// hash is h. It reports false if t is older than the per-second ring holds
// (an hour); the parts that still hold t count it.
func (s *space) add(t int64, id string, h uint64, passed bool) bool {
	s.last = max(s.last, t)
	s.minutes.add(t/60, passed)
	s.minute.add(t, id, h, passed)
	s.hour.add(t, id, h, passed)
	return s.seconds.add(t, passed)
}
