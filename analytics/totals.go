package analytics

import "time"

// TotalsMinutes is how many minutes [Recorder.Totals] adds up: the minute
// of now and the 59 before it, the last hour (59 to 60 minutes).
const TotalsMinutes = 60

// TotalsSpan returns the Unix minutes (Unix second / 60) that the totals
// at now add up: first to last, TotalsMinutes of them, as every node
// counts them.
func TotalsSpan(now time.Time) (first, last int64) {
	last = floorDiv(now.Unix(), 60)
	return last - TotalsMinutes + 1, last
}

// Totals returns the passed and denied decisions of each of keys over the
// last hour ending at now (the minutes of [TotalsSpan]), in the order of
// keys: zero for a namespace not tracked one by one. The queue is applied
// first. It reads TotalsMinutes slots per key, under the recorder's lock:
// the caller bounds keys.
func (r *Recorder) Totals(keys []Key, now time.Time) []Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain()
	first, last := TotalsSpan(now)
	out := make([]Counts, len(keys))
	for i, k := range keys {
		s := r.spaces[k]
		if s == nil {
			continue
		}
		for m := first; m <= last; m++ {
			c := s.minutes.at(m)
			out[i].Passed += uint64(c.passed)
			out[i].Denied += uint64(c.denied)
		}
	}
	return out
}
