package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// AnalyticsAnswer answers a peer's analytics call: it gets the call's JSON
// body and returns the reply, which is encoded as JSON. An error answers
// 400 with its text (a request this node cannot answer).
type AnalyticsAnswer func(ctx context.Context, request []byte) (any, error)

// MaxAnalyticsReply is the most a node reads of the reply to an analytics
// call: a longer reply is cut there and fails to decode, and its member is
// left out of the answer. Package analytics/cluster keeps its replies
// within it.
const MaxAnalyticsReply = 4 << 20

// replyCap is the most a node reads of the reply to a call of kind.
func replyCap(kind Kind) int64 {
	if kind == KindAnalytics {
		return MaxAnalyticsReply
	}
	return maxBody
}

// ServeAnalytics sets what this node answers the other members' analytics
// calls with (signed and checked like every peer call); until it is set,
// they get 404. Package analytics/cluster sets it.
func (o *Origin) ServeAnalytics(answer AnalyticsAnswer) { o.analytics.Store(&answer) }

func (o *Origin) serveAnalytics(ctx context.Context, body []byte) (any, int, error) {
	answer := o.analytics.Load()
	if answer == nil {
		return nil, http.StatusNotFound, errors.New("cluster: analytics: not served by this node")
	}
	reply, err := (*answer)(ctx, body)
	if err != nil {
		return bad(KindAnalytics, "%v", err)
	}
	return reply, http.StatusOK, nil
}

// AskPeers sends an analytics call with req to every member but this node
// whose breaker is not open, all at once, each within Config.Timeout, and
// hands each reply that comes back to take, one at a time. It returns how
// many members answered and how many were asked; the others are left out
// (their failures are counted by the Observer, like every call's).
//
// Analytics calls go around the peers' breakers: a late or failed answer
// never counts toward opening one. A breaker routes the counters (an open
// one moves the peer's counters to a stand-in), and analytics answers,
// heavier and rarer than counter calls, say nothing about those.
func (o *Origin) AskPeers(ctx context.Context, req any, take func(reply json.RawMessage)) (answered, asked int) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, 0
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, p := range o.view.Load().peers {
		if p.open() {
			continue
		}
		asked++
		wg.Go(func() {
			var raw json.RawMessage
			if o.askPeer(ctx, p, body, &raw) != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			answered++
			take(raw)
		})
	}
	wg.Wait()
	return answered, asked
}

// askPeer sends one analytics call to p within Config.Timeout, outside p's
// breaker, and counts its outcome.
func (o *Origin) askPeer(ctx context.Context, p *peer, body []byte, reply *json.RawMessage) error {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	start := time.Now()
	err := o.post(ctx, p, KindAnalytics, body, reply)
	o.cfg.Observer.RPC(KindAnalytics, outcomeOf(err), time.Since(start))
	if err != nil {
		return fmt.Errorf("cluster: %s at %s: %w", KindAnalytics, p.id, err)
	}
	return nil
}
