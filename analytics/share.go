package analytics

import (
	"fmt"
	"time"
)

// Counts are the decisions of one period, as nodes share them.
type Counts struct {
	// Passed and Denied count the period's decisions.
	Passed, Denied uint64
}

// TopKey names one bucket of a top-list window, as nodes share it.
type TopKey struct {
	// Window is Minute (10-second buckets) or Hour (10-minute buckets).
	Window Interval
	// Period is the bucket's number: its first Unix second divided by its
	// width.
	Period int64
	// Denied is true for the denials' sketch, false for the requests'.
	Denied bool
}

// Part is what one node holds of one namespace's analytics, or of a recent
// span of it: what [Recorder.Changes] exports and [Recorder.ReportWith]
// adds to a report. Parts of different nodes count different decisions.
type Part struct {
	// Seconds and Minutes are the series, by Unix second and by Unix
	// minute (Unix second / 60).
	Seconds, Minutes map[int64]Counts
	// Top are the top-list buckets' sketches.
	Top map[TopKey]Summary
}

// Changes returns, for every namespace with a decision at or after since
// (to the second), its periods and top-list buckets from since to now: a
// node publishes them for the others of its region (periods it sends again
// carry its whole count, so sending one twice counts nothing twice). The
// queue is applied first.
func (r *Recorder) Changes(since, now time.Time) map[Key]Part {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain()
	from, to := since.Unix(), now.Unix()
	out := map[Key]Part{}
	for k, s := range r.spaces {
		if s.last >= from {
			out[k] = s.part(from, to)
		}
	}
	return out
}

// part exports s's periods and buckets from second from to second to (at
// most the rings' lengths back).
func (s *space) part(from, to int64) Part {
	p := Part{Seconds: map[int64]Counts{}, Minutes: map[int64]Counts{}, Top: map[TopKey]Summary{}}
	for t := max(from, to-SecondSlots+1); t <= to; t++ {
		if c := s.seconds.at(t); c != (counts{}) {
			p.Seconds[t] = Counts{Passed: uint64(c.passed), Denied: uint64(c.denied)}
		}
	}
	for m := max(floorDiv(from, 60), floorDiv(to, 60)-MinuteSlots+1); m <= floorDiv(to, 60); m++ {
		if c := s.minutes.at(m); c != (counts{}) {
			p.Minutes[m] = Counts{Passed: uint64(c.passed), Denied: uint64(c.denied)}
		}
	}
	for _, w := range []struct {
		iv Interval
		w  *window
	}{{Minute, &s.minute}, {Hour, &s.hour}} {
		for i := range w.w.buckets {
			b := &w.w.buckets[i]
			if b.period < from/w.w.width || b.period > to/w.w.width {
				continue
			}
			if b.requests != nil {
				p.Top[TopKey{Window: w.iv, Period: b.period}] = b.requests.summary()
			}
			if b.denied != nil {
				p.Top[TopKey{Window: w.iv, Period: b.period, Denied: true}] = b.denied.summary()
			}
		}
	}
	return p
}

// ReportWith is [Recorder.Report] with the parts of other nodes added: the
// region's answer. A part's periods and buckets outside the interval are
// ignored; so is a part's bucket of a window other than the one asked.
func (r *Recorder) ReportWith(workspace, namespace string, iv Interval, now time.Time, parts []Part) (Report, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain()
	s := r.spaces[Key{Workspace: workspace, Namespace: namespace}]
	return reportOf(s, iv, now.Unix(), parts)
}

// PartOf returns what this node holds of workspace's namespace that a
// report over iv ending at now reads ([Recorder.ReportWith] on another
// node adds it to its own), and false when this node has nothing of it.
// The queue is applied first.
func (r *Recorder) PartOf(workspace, namespace string, iv Interval, now time.Time) (Part, bool, error) {
	var back int64
	switch iv {
	case Minute:
		back = 7 * minuteWidth
	case Hour:
		back = max(SecondSlots, 7*hourWidth)
	case Day:
		back = 60 * MinuteSlots
	default:
		return Part{}, false, fmt.Errorf("%w: %q (want %q, %q or %q)", ErrInvalidInterval, string(iv), Minute, Hour, Day)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain()
	s := r.spaces[Key{Workspace: workspace, Namespace: namespace}]
	if s == nil {
		return Part{}, false, nil
	}
	to := now.Unix()
	return s.part(to-back, to), true, nil
}
