package analytics

import "sync/atomic"

// event is one recorded decision waiting in the queue.
type event struct {
	workspace, namespace, identifier string
	second                           int64 // Unix seconds
	passed                           bool
}

// cell is one slot of the queue. seq says whose turn it is: pos while free
// for the producer of position pos, pos+1 once that producer wrote it.
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

// push appends the event of its arguments, written in place; false if the
// queue is full.
func (q *queue) push(workspace, namespace, identifier string, second int64, passed bool) bool {
	pos := q.tail.Load()
	for {
		c := &q.cells[pos&q.mask]
		seq := c.seq.Load()
		switch d := int64(seq - pos); {
		case d == 0:
			if q.tail.CompareAndSwap(pos, pos+1) {
				c.ev.workspace, c.ev.namespace, c.ev.identifier = workspace, namespace, identifier
				c.ev.second, c.ev.passed = second, passed
				c.seq.Store(pos + 1)
				return true
			}
			pos = q.tail.Load()
		case d < 0:
			return false
		default:
			pos = q.tail.Load()
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
