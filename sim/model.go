package sim

import "github.com/sluicehq/sluice/internal/window"

// model is the exact single-node reference: the decision rule of
// docs/explanation/decisions.md ("The rule") applied to the merged stream of
// requests in time order, on integers (the previous cell is weighted with a
// 128-bit product by internal/window). It holds every cell it has counted.
type model struct {
	d     int64 // window in ms
	cells map[modelCell]int64
}

type modelCell struct {
	id  int
	seq int64
}

func newModel(d int64) *model { return &model{d: d, cells: make(map[modelCell]int64)} }

// admit decides a request of cost on identifier id at Unix ms t under
// limit, counts it if it passes, and reports whether it passed.
func (m *model) admit(id int, t, limit, cost int64) bool {
	p := window.At(t, m.d)
	cur := modelCell{id, p.Seq}
	before := p.Before(m.cells[cur], m.cells[modelCell{id, p.Seq - 1}])
	if !window.Decide(before, limit, cost).Success {
		return false
	}
	m.cells[cur] += cost
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
