package analytics

import (
	"fmt"
	"time"
)

// Interval selects what a [Report] covers.
type Interval string

// The intervals of a report.
const (
	// Minute: the series per second over the last 60 s, the top lists over
	// the last minute (the current 10-second bucket and the six before it:
	// 60 to 70 s).
	Minute Interval = "1m"
	// Hour: the series per second over the last 3600 s, the top lists over
	// the last hour (the current 10-minute bucket and the six before it: 60
	// to 70 min).
	Hour Interval = "1h"
	// Day: the series per minute over the last 1440 minutes, the top lists
	// over the last hour (heavy hitters are kept for an hour at most).
	Day Interval = "24h"
)

// Point is one period of a series.
type Point struct {
	// Time is the start of the period (a second or a minute).
	Time time.Time
	// Passed and Denied count the decisions of the period.
	Passed, Denied uint64
}

// Report is the analytics of one namespace over an interval.
type Report struct {
	// Tracked is false when the recorder holds nothing for the namespace:
	// no decision yet (or none for IdleAfter), or the namespace came after
	// the cap and is counted in the aggregate. Series is then all zeros.
	Tracked bool
	// Step is the length of a period of Series: a second or a minute.
	Step time.Duration
	// Series holds every period of the interval, oldest first, ending with
	// the period of now.
	Series []Point
	// Requests and Denials are the totals of the top lists' window: the N
	// of their error bound.
	Requests, Denials uint64
	// TopRequests and TopDenied are the TopN identifiers with the most
	// requests and the most denials over the window, the largest first.
	// A count is at most Error above the true count; Error ≤ N/SketchSize.
	TopRequests, TopDenied []Heavy
}

// Report returns the analytics of workspace's namespace over iv ending at
// now, after applying the queue. An invalid interval is an error wrapping
// ErrInvalidInterval.
func (r *Recorder) Report(workspace, namespace string, iv Interval, now time.Time) (Report, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain()
	return reportOf(r.spaces[Key{Workspace: workspace, Namespace: namespace}], iv, now.Unix(), nil)
}

// Other returns the aggregate of the namespaces beyond the cap, all
// workspaces together, as [Recorder.Report] does for one namespace. Its
// top lists name identifiers of any of those namespaces.
func (r *Recorder) Other(iv Interval, now time.Time) (Report, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain()
	return reportOf(r.other, iv, now.Unix(), nil)
}

// reportOf builds the report of s (nil: nothing recorded here) and the
// parts of other nodes at second now.
func reportOf(s *space, iv Interval, now int64, parts []Part) (Report, error) {
	var rep Report
	var points, per int64 // points of the series, seconds per point
	switch iv {
	case Minute:
		points, per = 60, 1
	case Hour:
		points, per = SecondSlots, 1
	case Day:
		points, per = MinuteSlots, 60
	default:
		return rep, fmt.Errorf("%w: %q (want %q, %q or %q)", ErrInvalidInterval, string(iv), Minute, Hour, Day)
	}
	rep.Step = time.Duration(per) * time.Second
	rep.Series = make([]Point, points)
	first := floorDiv(now, per) - points + 1
	for i := range rep.Series {
		rep.Series[i].Time = time.Unix((first+int64(i))*per, 0).UTC()
	}
	rep.TopRequests, rep.TopDenied = []Heavy{}, []Heavy{}
	w, width := Hour, int64(hourWidth)
	if iv == Minute {
		w, width = Minute, minuteWidth
	}
	var requests, denied []Summary
	if s != nil {
		rep.Tracked = true
		r, win := &s.seconds, &s.hour
		if per == 60 {
			r = &s.minutes
		}
		if iv == Minute {
			win = &s.minute
		}
		for i := range rep.Series {
			c := r.at(first + int64(i))
			rep.Series[i].Passed, rep.Series[i].Denied = uint64(c.passed), uint64(c.denied)
		}
		rs, ds := win.sketches(now)
		requests, denied = summaries(rs), summaries(ds)
	}
	for _, p := range parts {
		rep.Tracked = true
		addSeries(rep.Series, first, per, p)
		for k, sum := range p.Top {
			if k.Window != w || k.Period > now/width || k.Period <= now/width-topBuckets {
				continue
			}
			if k.Denied {
				denied = append(denied, sum)
			} else {
				requests = append(requests, sum)
			}
		}
	}
	mr, md := merge(requests), merge(denied)
	rep.Requests, rep.Denials = mr.total, md.total
	rep.TopRequests, rep.TopDenied = top(mr.heavy), top(md.heavy)
	return rep, nil
}

// addSeries adds a part's periods to a series of per-second points from
// period first.
func addSeries(series []Point, first, per int64, p Part) {
	periods := p.Seconds
	if per == 60 {
		periods = p.Minutes
	}
	for t, c := range periods {
		if i := t - first; i >= 0 && i < int64(len(series)) {
			series[i].Passed += c.Passed
			series[i].Denied += c.Denied
		}
	}
}

// top returns the first TopN of h, never nil.
func top(h []Heavy) []Heavy {
	if len(h) > TopN {
		h = h[:TopN]
	}
	return append([]Heavy{}, h...)
}

// floorDiv is a/b rounded down.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
