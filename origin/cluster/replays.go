package cluster

import (
	"sync"
	"time"
)

// replayBucket is the span of call timestamps whose nonces share a bucket.
const replayBucket = 10 * time.Second

// replays remembers the nonce of every authenticated call a node took, for
// as long as the call's timestamp is accepted (maxSkew either side of the
// node's clock), so that a captured call cannot be taken twice. A replay
// carries the timestamp it was signed with, so nonces are kept in buckets
// by timestamp: a call is checked against one bucket, and a bucket is
// dropped whole once every timestamp in it is stale. Memory is bounded by
// the calls of two minutes; unauthenticated calls never reach it.
type replays struct {
	mu      sync.Mutex
	buckets map[int64]map[string]struct{} // timestamp / replayBucket → nonces
}

func newReplays() *replays {
	return &replays{buckets: map[int64]map[string]struct{}{}}
}

// claim records the nonce of a call signed at ts (Unix ms) and reports
// whether it is new. now is the receiver's clock, Unix ms.
func (r *replays) claim(ts int64, nonce string, now int64) bool {
	width := replayBucket.Milliseconds()
	b := ts / width
	r.mu.Lock()
	defer r.mu.Unlock()
	nonces := r.buckets[b]
	if nonces == nil {
		r.dropStale(now - maxSkew.Milliseconds())
		nonces = map[string]struct{}{}
		r.buckets[b] = nonces
	}
	if _, taken := nonces[nonce]; taken {
		return false
	}
	nonces[nonce] = struct{}{}
	return true
}

// dropStale drops the buckets whose timestamps all lie before oldest.
func (r *replays) dropStale(oldest int64) {
	width := replayBucket.Milliseconds()
	for b := range r.buckets {
		if (b+1)*width <= oldest {
			delete(r.buckets, b)
		}
	}
}
