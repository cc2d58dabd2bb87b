package sluice_test

import (
	"math/big"
	"time"

	"github.com/sluicehq/sluice"
)

// model is the reference model of docs/decisions.md ("The rule"),
// written independently of the engine: a plain map of fixed cells,
// big-integer arithmetic, and the rules spelled out literally. The property
// tests compare the engine to it.
type model struct {
	cells map[modelCell]int64
}

type modelCell struct {
	ws, ns, id string
	d, seq     int64
}

func newModel() *model { return &model{cells: map[modelCell]int64{}} }

// state returns the usage before a request: cur + floor(prev*(d-elapsed)/d).
func (m *model) state(r sluice.Request) (cell modelCell, before int64) {
	t := r.Time.UnixMilli()
	d := r.Duration.Milliseconds()
	seq := t / d
	elapsed := t - seq*d
	cell = modelCell{r.Workspace, r.Namespace, r.Identifier, d, seq}
	prevCell := cell
	prevCell.seq--
	weighted := new(big.Int).Mul(big.NewInt(m.cells[prevCell]), big.NewInt(d-elapsed))
	weighted.Quo(weighted, big.NewInt(d))
	sum := new(big.Int).Add(weighted, big.NewInt(m.cells[cell]))
	return cell, sum.Int64()
}

func (m *model) answer(r sluice.Request, before int64, success bool) sluice.Response {
	current := before
	if success {
		current += r.Cost
	}
	d := r.Duration.Milliseconds()
	return sluice.Response{
		Success:   success,
		Limit:     r.Limit,
		Current:   current,
		Remaining: max(0, r.Limit-current),
		Reset:     time.UnixMilli((r.Time.UnixMilli()/d + 1) * d),
	}
}

func (m *model) passes(r sluice.Request, before int64) bool {
	total := new(big.Int).Add(big.NewInt(before), big.NewInt(r.Cost))
	return total.Cmp(big.NewInt(r.Limit)) <= 0
}

// limit decides one request and applies it.
func (m *model) limit(r sluice.Request) sluice.Response {
	cell, before := m.state(r)
	ok := m.passes(r, before)
	if ok {
		m.cells[cell] += r.Cost
	}
	return m.answer(r, before, ok)
}

// report counts r whatever the limit says (Limiter.Report): the cell
// grows by r.Cost and the answer passes with the state after it.
func (m *model) report(r sluice.Request) sluice.Response {
	cell, before := m.state(r)
	m.cells[cell] += r.Cost
	return m.answer(r, before, true)
}

// reportMany counts every report of a batch in order (Limiter.ReportMany).
func (m *model) reportMany(rs []sluice.Request) []sluice.Response {
	out := make([]sluice.Response, len(rs))
	for i, r := range rs {
		out[i] = m.report(r)
	}
	return out
}

// limitMany decides a batch all-or-nothing, on a copy of the counts.
func (m *model) limitMany(rs []sluice.Request) []sluice.Response {
	trial := &model{cells: map[modelCell]int64{}}
	for k, v := range m.cells {
		trial.cells[k] = v
	}
	out := make([]sluice.Response, len(rs))
	all := true
	for i, r := range rs {
		out[i] = trial.limit(r)
		all = all && out[i].Success
	}
	if all {
		m.cells = trial.cells
		return out
	}
	for i, r := range rs {
		_, before := m.state(r)
		out[i].Current, out[i].Remaining = before, max(0, r.Limit-before)
	}
	return out
}
