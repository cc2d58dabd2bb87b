package analytics

// Sizes of the time-series rings of one namespace.
const (
	// SecondSlots is the per-second ring: the last hour.
	SecondSlots = 3600
	// MinuteSlots is the per-minute ring: the last day.
	MinuteSlots = 1440
)

// counts is one slot of a ring: passed and denied decisions. 32 bits each
// hold up to 4.29 billion decisions per slot (71 million a second for a
// minute slot).
type counts struct{ passed, denied uint32 }

// ring is a fixed-size time series: slot t%len holds period t, for the
// len periods up to head. Periods are whole seconds or minutes since the
// Unix epoch.
type ring struct {
	head  int64 // the latest period written or cleared; 0 before any
	slots []counts
}

func newRing(n int) ring { return ring{slots: make([]counts, n)} }

// add counts one decision in period t. A period newer than head moves the
// ring forward, clearing the periods skipped; one older than the ring
// holds is dropped (reported false).
func (r *ring) add(t int64, passed bool) bool {
	n := int64(len(r.slots))
	if t > r.head {
		from := max(r.head+1, t-n+1)
		for p := from; p <= t; p++ {
			r.slots[p%n] = counts{}
		}
		r.head = t
	}
	if t <= r.head-n || t < 0 {
		return false
	}
	c := &r.slots[t%n]
	if passed {
		c.passed++
	} else {
		c.denied++
	}
	return true
}

// at returns the counts of period t: zero for a period the ring does not
// hold (not reached yet, or too old).
func (r *ring) at(t int64) counts {
	n := int64(len(r.slots))
	if t > r.head || t <= r.head-n || t < 0 {
		return counts{}
	}
	return r.slots[t%n]
}
