package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/analytics"
)

// Bounds of a totals call (a request whose "totals" lists namespaces).
const (
	// maxTotalsKeys bounds the namespaces of one totals call.
	maxTotalsKeys = 1000
	// maxTotalsRequest bounds the JSON of the namespaces of one totals
	// call, well within the body the peer RPC reads; longer lists are
	// asked in several calls.
	maxTotalsRequest = 256 << 10
)

// Totals returns the region's passed and denied decisions of each of keys
// over the last hour ending at now (the minutes of analytics.TotalsSpan):
// this node's and those of every member that answered, asked all at once
// in calls of at most maxTotalsKeys namespaces and maxTotalsRequest bytes.
// The caller bounds keys.
func (r *Region) Totals(keys []analytics.Key, now time.Time) []analytics.Counts {
	out := r.cfg.Recorder.Totals(keys, now)
	for from := 0; from < len(keys); {
		to := totalsChunk(keys, from)
		chunk := keys[from:to]
		req := request{Totals: chunk, Now: now.UnixMilli()}
		answered, asked := r.cfg.Peers.AskPeers(context.Background(), req, func(raw json.RawMessage) {
			var counts []analytics.Counts
			if json.Unmarshal(raw, &counts) != nil || len(counts) != len(chunk) {
				return
			}
			for i, c := range counts {
				out[from+i].Passed += c.Passed
				out[from+i].Denied += c.Denied
			}
		})
		if answered < asked {
			r.warn("analytics: some cluster members did not answer for their totals; the totals cover the others", "answered", answered, "asked", asked)
		}
		from = to
	}
	return out
}

// totalsChunk returns the end of the call that asks for keys from from:
// at least one key, then as many as maxTotalsKeys and maxTotalsRequest
// allow.
func totalsChunk(keys []analytics.Key, from int) int {
	size := 0
	for i := from; i < len(keys); i++ {
		b, _ := json.Marshal(keys[i]) // two strings: cannot fail
		size += len(b) + len(",")
		if i > from && (i-from >= maxTotalsKeys || size > maxTotalsRequest) {
			return i
		}
	}
	return len(keys)
}

// answerTotals answers a totals call from this node's recorder.
func (r *Region) answerTotals(req request) (any, error) {
	if len(req.Totals) > maxTotalsKeys {
		return nil, fmt.Errorf("%w: %d namespaces, over %d", errInvalidRequest, len(req.Totals), maxTotalsKeys)
	}
	for _, k := range req.Totals {
		for _, s := range []string{k.Workspace, k.Namespace} {
			if len(s) > maxNameBytes || !utf8.ValidString(s) {
				return nil, fmt.Errorf("%w: a name over %d bytes or not UTF-8", errInvalidRequest, maxNameBytes)
			}
		}
	}
	return r.cfg.Recorder.Totals(req.Totals, time.UnixMilli(req.Now)), nil
}
