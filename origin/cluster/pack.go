package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Bounds of the peer RPC. A call reaches its body only if its headers are
// signed for this node's current incarnation by a member (checkHeaders);
// these bound what even a member can make a node hold.
const (
	// MaxKeyBytes bounds the names of a counter the cluster serves: its
	// workspace, namespace and identifier together, in bytes. It covers
	// every key `sluice serve` makes: HTTP API keys (a 255-byte workspace,
	// 512-byte namespace and identifier: 1279 bytes) and Envoy RLS keys (a
	// 255-byte workspace, a 245-byte domain and an identifier of at most 8
	// entries of 512-byte keys and values, 8256 bytes: 8756 in all). A call
	// for a longer key fails with [ErrKeyTooLong].
	MaxKeyBytes = 9 << 10
	// maxCallCells bounds the deltas of one apply call and the seeds of one
	// seed call: the limiter's default replay batch
	// (256 cells). A larger batch is split into calls.
	maxCallCells = 256
	// maxSeedShares bounds the writers' shares of one seed on the wire; a
	// cell with more is sent as several seeds (see toWireSeeds).
	maxSeedShares = 64
	// maxSkip bounds the members a call says its sender routes around.
	maxSkip = 256
	// maxBody bounds the body of a peer call and of its reply. A batch of
	// maxCallCells deltas of the largest HTTP API keys takes 357,414 bytes
	// (TestMaxBodyFitsAReplayBatch); the sender splits a batch that does
	// not fit (longer Envoy RLS identifiers, characters that JSON escapes,
	// many writers' shares) into calls under it. The largest single delta
	// or seed (a MaxKeyBytes key, every byte escaped to 6, and
	// maxSeedShares shares) takes 58,686 bytes.
	maxBody = 512 << 10
	// maxInflightBody bounds the bodies of the peer calls being read at
	// once, all senders together: 128 calls of maxBody. A call over it is
	// refused with 503 and sent again later.
	maxInflightBody = 64 << 20
)

// ErrKeyTooLong is returned for a call on a counter whose names exceed
// [MaxKeyBytes].
var ErrKeyTooLong = errors.New("cluster: counter key too long")

// pack returns the bodies of the calls that carry entries (each the JSON
// of one delta or seed) in order, {"d":[...],"sk":skip}, each with at most
// maxCallCells entries and maxBody bytes; firsts[i] is the index of the
// first entry of bodies[i].
func pack(entries [][]byte, skip []string) (bodies [][]byte, firsts []int, err error) {
	const head = `{"d":[`
	tail := []byte("]}")
	if len(skip) > 0 {
		sk, err := json.Marshal(skip)
		if err != nil {
			return nil, nil, fmt.Errorf("cluster: encoding the members skipped: %w", err)
		}
		tail = append(append([]byte(`],"sk":`), sk...), '}')
	}
	var body []byte
	n := 0
	for i, e := range entries {
		if len(head)+len(e)+len(tail) > maxBody {
			return nil, nil, fmt.Errorf("%w: an entry of %d bytes does not fit in a call", ErrKeyTooLong, len(e))
		}
		if body != nil && (n == maxCallCells || len(body)+1+len(e)+len(tail) > maxBody) {
			bodies = append(bodies, append(body, tail...))
			body = nil
		}
		if body == nil {
			body, n = append(make([]byte, 0, 64<<10), head...), 0
			firsts = append(firsts, i)
		} else {
			body = append(body, ',')
		}
		body = append(body, e...)
		n++
	}
	if body != nil {
		bodies = append(bodies, append(body, tail...))
	}
	return bodies, firsts, nil
}

// encodeAll returns the JSON of each of vs.
func encodeAll[T any](vs []T) ([][]byte, error) {
	out := make([][]byte, len(vs))
	for i, v := range vs {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("cluster: encoding: %w", err)
		}
		out[i] = b
	}
	return out, nil
}
