package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/sluicehq/sluice/origin"
)

// maxDecides bounds the decisions of one decides call. With one call on
// its way per peer, a node sends a peer at most maxDecides decisions per
// round trip: 128,000 a second at a round trip of a millisecond. A
// decision takes about 200 bytes on the wire, so a full call stays far
// under maxBody.
const maxDecides = 128

// decidesRequest carries the strict-mode decisions of several counters
// the receiver owns, decided in order, each as a decide call would be.
type decidesRequest struct {
	C []decideRequest `json:"c"`
}

// decidesReply answers a decidesRequest in its order: R[i] is the verdict
// of the i-th decision, or E[i] (not empty) why the owner could not make
// it.
type decidesReply struct {
	R []decideReply `json:"r"`
	E []string      `json:"e"`
}

// decideQueue gathers the decisions bound for one peer while a call to it
// is on its way, so that the decisions of several counters share one RPC
// under load and none waits for a timer. The caller that finds no call on
// its way sends its decision at once and leads; decisions that come while
// its call runs wait in the queue, and when it returns, the first of them
// leads the next call, which carries all of them (up to maxDecides; the
// rest wait for the call after). A caller thus waits for the call on its
// way and its own, and for more only while over maxDecides decisions
// wait.
type decideQueue struct {
	mu      sync.Mutex
	busy    bool
	waiting []*pendingDecide
}

// pendingDecide is one decision in a decideQueue.
type pendingDecide struct {
	check origin.Check
	lead  chan []*pendingDecide // the batch to send, when this caller leads
	done  chan decideResult     // the verdict, when another caller sent it
}

type decideResult struct {
	v   origin.Verdict
	err error
}

// join adds pd and returns the batch to send if pd leads, or nil if it
// waits.
func (q *decideQueue) join(pd *pendingDecide) []*pendingDecide {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.busy {
		q.busy = true
		return []*pendingDecide{pd}
	}
	q.waiting = append(q.waiting, pd)
	return nil
}

// leave takes pd out of the queue unless a batch took it already; it
// reports whether it did.
func (q *decideQueue) leave(pd *pendingDecide) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, w := range q.waiting {
		if w == pd {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// handOff passes the lead to the first waiting decision with the batch it
// sends, or marks the queue idle if none waits.
func (q *decideQueue) handOff() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.busy = false
		return
	}
	n := min(len(q.waiting), maxDecides)
	batch := q.waiting[:n:n]
	q.waiting = append([]*pendingDecide(nil), q.waiting[n:]...)
	batch[0].lead <- batch
}

// remoteDecide makes c's decision at its owner p, in a call of its own or
// in one with the decisions of other counters p owns (see decideQueue).
func (o *Origin) remoteDecide(ctx context.Context, p *peer, c origin.Check) (origin.Verdict, error) {
	pd := &pendingDecide{check: c, lead: make(chan []*pendingDecide, 1), done: make(chan decideResult, 1)}
	batch := p.decides.join(pd)
	if batch == nil {
		select {
		case r := <-pd.done:
			return r.v, r.err
		case batch = <-pd.lead:
		case <-ctx.Done():
			if p.decides.leave(pd) {
				return origin.Verdict{}, fmt.Errorf("cluster: decide at %s: %w", p.id, context.Cause(ctx))
			}
			select { // taken into a batch: its verdict, or the lead, comes
			case r := <-pd.done:
				return r.v, r.err
			case batch = <-pd.lead:
			}
		}
	}
	defer p.decides.handOff()
	if len(batch) > 1 {
		// The call carries the others' decisions: the leader's caller
		// giving up must not cut it (call bounds it with Config.Timeout).
		ctx = context.WithoutCancel(ctx)
	}
	results := o.sendDecides(ctx, p, batch)
	for i, w := range batch[1:] {
		w.done <- results[i+1]
	}
	return results[0].v, results[0].err
}

// sendDecides sends the decisions of batch to p, in one decides call when
// there are several and p takes them, and returns their results in order.
func (o *Origin) sendDecides(ctx context.Context, p *peer, batch []*pendingDecide) []decideResult {
	results := make([]decideResult, len(batch))
	if len(batch) > 1 && !p.noDecides.Load() {
		err := o.decidesCall(ctx, p, batch, results)
		if err == nil {
			return results
		}
		if !errors.Is(err, errUnknownCall) {
			for i := range results {
				results[i].err = err
			}
			return results
		}
		p.noDecides.Store(true) // a peer of a version without decides calls
		o.cfg.Logger.Info("cluster: peer takes no decides calls; sending decisions one by one", "peer", p.id)
	}
	for i, pd := range batch {
		results[i].v, results[i].err = o.decideCall(ctx, p, pd.check)
	}
	return results
}

// decideCall makes c's decision at p in a decide call of its own.
func (o *Origin) decideCall(ctx context.Context, p *peer, c origin.Check) (origin.Verdict, error) {
	var reply decideReply
	if err := o.call(ctx, p, KindDecide, toDecideRequest(c), &reply); err != nil {
		return origin.Verdict{}, err
	}
	return reply.verdict(p, len(c.Asks))
}

// decidesCall makes the decisions of batch at p in one decides call and
// fills in results. A batch whose body would be over maxBody is sent one
// decision at a time.
func (o *Origin) decidesCall(ctx context.Context, p *peer, batch []*pendingDecide, results []decideResult) error {
	req := decidesRequest{C: make([]decideRequest, len(batch))}
	for i, pd := range batch {
		req.C[i] = toDecideRequest(pd.check)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("cluster: encoding %s: %w", KindDecides, err)
	}
	if len(body) > maxBody {
		for i, pd := range batch {
			results[i].v, results[i].err = o.decideCall(ctx, p, pd.check)
		}
		return nil
	}
	var reply decidesReply
	if err := o.callBody(ctx, p, KindDecides, body, &reply); err != nil {
		return err
	}
	if len(reply.R) != len(batch) || len(reply.E) != len(batch) {
		return fmt.Errorf("cluster: %s at %s: %w: %d verdicts for %d decisions", KindDecides, p.id, ErrRefused, len(reply.R), len(batch))
	}
	for i, pd := range batch {
		if reply.E[i] != "" {
			results[i].err = fmt.Errorf("cluster: %s at %s: %s: %w", KindDecide, p.id, reply.E[i], origin.ErrUnavailable)
			continue
		}
		results[i].v, results[i].err = reply.R[i].verdict(p, len(pd.check.Asks))
	}
	return nil
}

// verdict returns r as the verdict of a check of asks asks from p.
func (r decideReply) verdict(p *peer, asks int) (origin.Verdict, error) {
	if len(r.A) != asks {
		return origin.Verdict{}, fmt.Errorf("cluster: %s at %s: %w: %d verdicts for %d asks", KindDecide, p.id, ErrRefused, len(r.A), asks)
	}
	return origin.Verdict{Admitted: r.A, Counts: countsReply{C: r.C, P: r.P, IC: r.IC, IP: r.IP}.counts(), Stale: r.Stale, Share: r.Share}, nil
}

// serveDecides makes the decisions of a decides call in order. A decision
// the store fails is answered with its error; the others stand.
func (o *Origin) serveDecides(ctx context.Context, body []byte) (any, int, error) {
	var req decidesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad(KindDecides, "%v", err)
	}
	if len(req.C) == 0 || len(req.C) > maxDecides {
		return bad(KindDecides, "%d decisions, want 1 to %d", len(req.C), maxDecides)
	}
	for i := range req.C {
		if !req.C[i].K.valid() {
			return bad(KindDecides, "decision %d: invalid counter key", i)
		}
	}
	reply := decidesReply{R: make([]decideReply, len(req.C)), E: make([]string, len(req.C))}
	for i := range req.C {
		r, err := o.decideHere(ctx, req.C[i].check())
		if err != nil {
			reply.E[i] = err.Error()
			continue
		}
		reply.R[i] = r
	}
	return reply, http.StatusOK, nil
}
