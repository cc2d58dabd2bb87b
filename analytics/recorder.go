package analytics

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of [Config].
const (
	// DefaultMaxNamespaces is the default cap on the namespaces tracked
	// one by one.
	DefaultMaxNamespaces = 256
	// DefaultQueueSize is the default length of the queue of decisions
	// recorded and not applied yet: 32,768, 0.1 s (sluice serve's interval
	// between two applications) of 327,680 decisions a second.
	DefaultQueueSize = 1 << 15
	// TopN is the length of each top list of a [Report].
	TopN = 10
	// IdleAfter is how long a namespace without decisions keeps its slot:
	// past it (a day, the longest series) it is forgotten and its slot
	// freed.
	IdleAfter = 24 * time.Hour
)

// BytesPerNamespace bounds the heap of one tracked namespace, not counting
// the identifiers its sketches hold: the two rings (40,320 bytes, 45,056
// as allocated) and, once every bucket has seen requests and denials, 28
// sketches (14 buckets, each of requests and of denials) of 2,728 bytes
// (3,072 as allocated), with their bookkeeping. A namespace without
// denials allocates half the sketches. The identifiers held add at most
// 28 × SketchSize = 1,792 strings of at most MaxIdentifierBytes each.
// TestBytesPerNamespace checks it.
const BytesPerNamespace = 132 << 10

// Errors of the package.
var (
	// ErrInvalidConfig is returned, wrapped with the reason, by [New].
	ErrInvalidConfig = errors.New("analytics: invalid config")
	// ErrInvalidInterval is returned, wrapped, by [Recorder.Report] for an
	// interval other than [Minute], [Hour] and [Day].
	ErrInvalidInterval = errors.New("analytics: invalid interval")
)

// Config configures a [Recorder]. The zero value is valid.
type Config struct {
	// MaxNamespaces caps the namespaces tracked one by one; decisions of
	// further namespaces are counted together in one aggregate (see
	// [Recorder.Other]). Default DefaultMaxNamespaces.
	MaxNamespaces int
	// QueueSize is the length of the queue between Record and the
	// recorder's state, a power of two. Default DefaultQueueSize.
	QueueSize int
}

// Key names a namespace of a workspace.
type Key struct {
	// Workspace is the namespace's workspace.
	Workspace string
	// Namespace is the namespace's name.
	Namespace string
}

// Stats are the recorder's own counts.
type Stats struct {
	// Namespaces is the number of namespaces tracked one by one.
	Namespaces int
	// Aggregated is the number of decisions counted in the aggregate of
	// namespaces beyond the cap.
	Aggregated uint64
	// Late is the number of decisions older than an hour when applied,
	// missing from the per-second series.
	Late uint64
	// Dropped is the number of decisions Record found no room for in the
	// queue and left out: the queue was not applied in time.
	Dropped uint64
}

// Recorder records rate-limit decisions and answers their analytics. It
// holds no goroutine and reads no clock: time is what the callers of
// Record, Advance and Report pass. Record is safe for concurrent use,
// lock-free, and never waits; Advance and Report take a lock.
type Recorder struct {
	q       *queue
	max     int
	seed    maphash.Seed
	dropped atomic.Uint64 // decisions that found the queue full

	mu     sync.Mutex
	spaces map[Key]*space
	other  *space // namespaces beyond the cap; nil until one comes
	last   Key    // the namespace of the last decision applied, and its space:
	lastSp *space // consecutive decisions mostly share one
	swept  int64  // the second of the last sweep of idle namespaces
	stats  Stats
}

// New returns a recorder configured by cfg.
func New(cfg Config) (*Recorder, error) {
	switch {
	case cfg.MaxNamespaces < 0:
		return nil, fmt.Errorf("%w: MaxNamespaces is negative", ErrInvalidConfig)
	case cfg.QueueSize < 0 || cfg.QueueSize&(cfg.QueueSize-1) != 0:
		return nil, fmt.Errorf("%w: QueueSize %d is not a power of two", ErrInvalidConfig, cfg.QueueSize)
	}
	if cfg.MaxNamespaces == 0 {
		cfg.MaxNamespaces = DefaultMaxNamespaces
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	return &Recorder{q: newQueue(cfg.QueueSize), max: cfg.MaxNamespaces, seed: maphash.MakeSeed(), spaces: map[Key]*space{}}, nil
}

// Record records one decision on identifier in workspace's namespace made
// at now: passed, or denied. It never takes a lock and never applies the
// queue: it queues the decision (a CAS and a store) or, if the queue is
// full, leaves it out and counts it in [Stats].Dropped.
func (r *Recorder) Record(workspace, namespace, identifier string, passed bool, now time.Time) {
	st := stamp(now.Unix(), passed)
	if !r.q.tryPush(workspace, namespace, identifier, st) && !r.q.push(workspace, namespace, identifier, st) {
		r.dropped.Add(1)
	}
}

// Advance applies the decisions queued so far and, once a minute of now,
// forgets the namespaces idle for IdleAfter. Call it a few times a second,
// on a goroutine that nothing else holds up: decisions recorded while the
// queue is full are dropped.
func (r *Recorder) Advance(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain()
	t := now.Unix()
	if t-r.swept < 60 {
		return
	}
	r.swept = t
	r.last, r.lastSp = Key{}, nil
	idle := t - int64(IdleAfter/time.Second)
	for k, s := range r.spaces {
		if s.last < idle {
			delete(r.spaces, k)
		}
	}
	if r.other != nil && r.other.last < idle {
		r.other = nil
	}
}

// drain applies the queued decisions, at most one queue's length of them
// (producers may keep adding). The caller holds mu.
func (r *Recorder) drain() {
	var ev event
	for range len(r.q.cells) {
		if !r.q.pop(&ev) {
			return
		}
		r.apply(&ev)
	}
}

// apply adds one decision to its namespace's space, its identifier
// clipped to MaxIdentifierBytes.
func (r *Recorder) apply(ev *event) {
	if ev.second() < 0 {
		r.stats.Late++
		return
	}
	id := clip(ev.identifier)
	k := Key{Workspace: ev.workspace, Namespace: ev.namespace}
	s := r.lastSp
	if s == nil || k != r.last {
		s = r.space(k)
		r.last, r.lastSp = k, s
	}
	if s == r.other {
		r.stats.Aggregated++
	}
	if !s.add(ev.second(), id, maphash.String(r.seed, id), ev.passed()) {
		r.stats.Late++
	}
}

// space returns k's space, made if the cap allows, else the aggregate's.
func (r *Recorder) space(k Key) *space {
	s := r.spaces[k]
	if s == nil {
		if len(r.spaces) < r.max {
			s = newSpace()
			r.spaces[k] = s
		} else {
			if r.other == nil {
				r.other = newSpace()
			}
			s = r.other
		}
	}
	return s
}

// Stats returns the recorder's counts, after applying the queue.
func (r *Recorder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain()
	st := r.stats
	st.Namespaces = len(r.spaces)
	st.Dropped = r.dropped.Load()
	return st
}

// Namespaces returns the namespaces tracked one by one, sorted, after
// applying the queue.
func (r *Recorder) Namespaces() []Key {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drain()
	keys := make([]Key, 0, len(r.spaces))
	for k := range r.spaces {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Key) int {
		if c := cmp.Compare(a.Workspace, b.Workspace); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace, b.Namespace)
	})
	return keys
}
