package analytics

import "sync/atomic"

// event is one recorded decision waiting in the queue.
type event struct {
	workspace, namespace, identifier string
	stamp                            int64 // Unix seconds << 1 | 1 if passed
}

// second and passed unpack the event's stamp.
func (e *event) second() int64 { return e.stamp >> 1 }
func (e *event) passed() bool  { return e.stamp&1 == 1 }

// stamp packs a decision's second and outcome.
func stamp(second int64, passed bool) int64 {
	s := second << 1
	if passed {
		s |= 1
	}
	return s
}

// cell is one slot of the queue, 64 bytes: one cache line. seq says whose
// turn it is: pos while free for the producer of position pos, pos+1 once
// that producer wrote it.
type cell struct {
	seq atomic.Uint64
	ev  event
}

// queue is a bounded lock-free queue of events for many producers and one
// consumer at a time (the caller of pop holds the recorder's lock): Dmitry
// Vyukov's bounded MPMC queue. A push is a load, a CAS and a store.
type queue struct {
	tail  atomic.Uint64
	_     [56]byte // tail alone on its cache line
	head  uint64   // consumer's position, under the recorder's lock
	mask  uint64
	cells []cell
}

// newQueue returns a queue of size cells, a power of two.
func newQueue(size int) *queue {
	q := &queue{mask: uint64(size - 1), cells: make([]cell, size)}
	for i := range q.cells {
		q.cells[i].seq.Store(uint64(i))
	}
	return q
}

// tryPush appends the event of its arguments, written in place, if the
// queue has room and no other producer claims the same cell meanwhile: one
// load of the tail, one of the cell, a CAS and a store. Small enough to be
// inlined.
func (q *queue) tryPush(workspace, namespace, identifier string, stamp int64) bool {
	pos := q.tail.Load()
	c := &q.cells[pos&q.mask]
	if c.seq.Load() != pos || !q.tail.CompareAndSwap(pos, pos+1) {
		return false
	}
	c.ev.workspace, c.ev.namespace, c.ev.identifier, c.ev.stamp = workspace, namespace, identifier, stamp
	c.seq.Store(pos + 1)
	return true
}

// push is tryPush, retried while other producers win the cell; false if
// the queue is full.
func (q *queue) push(workspace, namespace, identifier string, stamp int64) bool {
	for {
		if q.tryPush(workspace, namespace, identifier, stamp) {
			return true
		}
		pos := q.tail.Load()
		if int64(q.cells[pos&q.mask].seq.Load()-pos) < 0 {
			return false
		}
	}
}

// pop takes the oldest event into ev; false if there is none written yet.
// Only one goroutine may pop at a time.
func (q *queue) pop(ev *event) bool {
	c := &q.cells[q.head&q.mask]
	if c.seq.Load() != q.head+1 {
		return false
	}
	*ev = c.ev
	c.ev = event{} // drop the strings
	c.seq.Store(q.head + q.mask + 1)
	q.head++
	return true
}
