package sim

import "github.com/sluicehq/sluice/internal/window"

// model is the exact single-node reference: the decision rule of
// docs/decisions.md ("The rule") applied to the merged stream of
// requests in time order, on integers (the previous cell is weighted with a
// 128-bit product by internal/window). It holds every cell it counts, those
// of a run's windows: identity id's cell of sequence first+w at
// id × windows + w.
type model struct {
	d       int64 // window in ms
	first   int64 // the sequence of the run's first window
	windows int
	cells   []int64
}

// newModel returns the model of a run of windows windows of d ms from
// start (a window boundary), on ids identities.
func newModel(d, start int64, ids, windows int) *model {
	return &model{d: d, first: start / d, windows: windows, cells: make([]int64, ids*windows)}
}

// count returns the count of identity id's cell seq: 0 outside the run.
func (m *model) count(id int, seq int64) int64 {
	w := seq - m.first
	if w < 0 || w >= int64(m.windows) {
		return 0
	}
	return m.cells[id*m.windows+int(w)]
}

// admit decides a request of cost on identifier id at Unix ms t (within
// the run) under limit, counts it if it passes, and reports whether it
// passed.
func (m *model) admit(id int, t, limit, cost int64) bool {
	p := window.At(t, m.d)
	before := p.Before(m.count(id, p.Seq), m.count(id, p.Seq-1))
	if !window.Decide(before, limit, cost).Success {
		return false
	}
	m.cells[id*m.windows+int(p.Seq-m.first)] += cost
	return true
}

// admission is an admitted request: its instant (Unix ms) and cost.
type admission struct{ ms, cost int64 }

// busiest returns the most cost admitted within any span of d milliseconds,
// half open, given admissions in ascending time.
func busiest(got []admission, d int64) int64 {
	var best, sum int64
	lo := 0
	for _, a := range got {
		sum += a.cost
		for got[lo].ms <= a.ms-d {
			sum -= got[lo].cost
			lo++
		}
		best = max(best, sum)
	}
	return best
}
