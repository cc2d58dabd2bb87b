package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice/internal/breaker"
	"github.com/sluicehq/sluice/origin"
)

// RPCPath is the path prefix of the peer RPC on a node's HTTP port; a call
// is a POST of JSON to RPCPath+kind. v2 signs the receiver's id and
// incarnation: a node of an earlier version answers 404.
const RPCPath = "/sluice.cluster.v2/"

// peer is another member and the breaker of the calls to it.
type peer struct {
	id, base    string
	incarnation string // the run of the peer that calls are signed for
	breaker     *gobreaker.CircuitBreaker[struct{}]
	decides     decideQueue // strict-mode decisions waiting for a call to p
	noDecides   atomic.Bool // p answered a decides call 404: a version without it (a restart makes a new peer)
}

func (o *Origin) newPeer(id string, m Member) *peer {
	b := o.cfg.Breaker
	return &peer{id: id, base: strings.TrimRight(m.RPC, "/"), incarnation: m.Incarnation, breaker: breaker.New(breaker.Settings{
		Name:                "cluster-peer-" + id,
		ConsecutiveFailures: b.ConsecutiveFailures,
		HalfOpenProbes:      1,
		OpenTimeout:         b.OpenTimeout,
		Outcome:             func(err error) breaker.Outcome { return breaker.Outcome(outcomeOf(err)) },
		OnChange: func(from, to breaker.State) {
			o.cfg.Logger.Log(context.Background(), to.LogLevel(), "cluster: peer breaker "+to.String(), "peer", id, "from", from.String())
			// Routing around an open breaker changes owners: re-home. (The
			// breaker's lock is held here: only signal.)
			select {
			case o.changed <- struct{}{}:
			default:
			}
		},
	})}
}

// open reports whether p's breaker is open: calls to p fail at once.
func (p *peer) open() bool { return p.breaker.State() == gobreaker.StateOpen }

// closed reports whether p's breaker is closed: p answers.
func (p *peer) closed() bool { return p.breaker.State() == gobreaker.StateClosed }

// call sends one RPC of kind to p through its breaker, bounded by the
// configured timeout, and decodes the reply. Outage-class errors wrap
// [origin.ErrUnavailable].
func (o *Origin) call(ctx context.Context, p *peer, kind Kind, req, reply any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("cluster: encoding %s: %w", kind, err)
	}
	return o.callBody(ctx, p, kind, body, reply)
}

// callBody is call with the request already encoded.
func (o *Origin) callBody(ctx context.Context, p *peer, kind Kind, body []byte, reply any) error {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	start := time.Now()
	_, err := p.breaker.Execute(func() (struct{}, error) {
		return struct{}{}, o.post(ctx, p, kind, body, reply)
	})
	out := outcomeOf(err)
	o.cfg.Observer.RPC(kind, out, time.Since(start))
	switch out {
	case OutcomeOK:
		return nil
	case OutcomeError, OutcomeCanceled:
		return fmt.Errorf("cluster: %s at %s: %w", kind, p.id, err)
	default:
		return fmt.Errorf("cluster: %s at %s (%s): %w: %w", kind, p.id, out, err, origin.ErrUnavailable)
	}
}

// post sends one call, signed for p's incarnation. A call over maxBody is
// not sent: p would refuse it.
func (o *Origin) post(ctx context.Context, p *peer, kind Kind, body []byte, reply any) error {
	if len(body) > maxBody {
		return fmt.Errorf("%w: a %s call of %d bytes is over the cap of %d", ErrRefused, kind, len(body), maxBody)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+RPCPath+string(kind), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	req.Header.Set("Content-Type", "application/json")
	newCallAuth(o.key, kind, o.cfg.ID, p.id, p.incarnation, o.cfg.Clock().UnixMilli(), body).set(req.Header)
	res, err := o.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, replyCap(kind)))
	if err != nil {
		return err
	}
	switch {
	case res.StatusCode == http.StatusOK:
		if err := json.Unmarshal(raw, reply); err != nil {
			return fmt.Errorf("%w: bad reply: %w", ErrRefused, err)
		}
		return nil
	case res.StatusCode >= 500, res.StatusCode == http.StatusMisdirectedRequest:
		// 421: p is not the incarnation this node knows (it restarted);
		// the gossip brings the new one.
		return fmt.Errorf("%w: status %d: %s", ErrPeer, res.StatusCode, bytes.TrimSpace(raw))
	case res.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %w: %s", ErrRefused, errUnknownCall, bytes.TrimSpace(raw))
	default:
		return fmt.Errorf("%w: status %d: %s", ErrRefused, res.StatusCode, bytes.TrimSpace(raw))
	}
}

// errUnknownCall reports a call the peer answered 404: a kind its version
// does not serve.
var errUnknownCall = errors.New("unknown call (status 404)")

// outcomeOf classifies the error of a call.
func outcomeOf(err error) Outcome {
	var ne net.Error
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		return OutcomeRejected
	case errors.Is(err, ErrRefused):
		return OutcomeError
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return OutcomeTimeout
	default:
		return OutcomeUnavailable
	}
}

// Handler returns the peer RPC's path prefix and handler, to mount on the
// node's HTTP port. Calls must be signed with the cluster secret for this
// node's id and incarnation by a member; a root key does not reach it. A
// call is refused on its headers before its body is read (see
// [RefuseReason]); refusals are counted ([Observer.Refused]) and logged at
// a bounded rate.
func (o *Origin) Handler() (string, http.Handler) {
	return RPCPath, http.HandlerFunc(o.serveRPC)
}

func (o *Origin) serveRPC(w http.ResponseWriter, r *http.Request) {
	kind, body, release, ref := o.readCall(w, r)
	if ref != nil {
		o.refused(r, ref)
		http.Error(w, ref.msg, ref.status)
		return
	}
	defer release()
	if o.closed.Load() {
		http.Error(w, ErrClosed.Error(), http.StatusServiceUnavailable)
		return
	}
	reply, status, err := o.dispatch(r.Context(), kind, body)
	if err != nil {
		if status == http.StatusBadRequest {
			o.refused(r, refuse(status, ReasonBadRequest, "%v", err))
		}
		http.Error(w, err.Error(), status)
		return
	}
	out, err := json.Marshal(reply)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// readCall checks a call's method, kind and headers, then reads its body
// within the caps and checks its MAC. release gives back the body's share
// of maxInflightBody; call it once the body is no longer used.
func (o *Origin) readCall(w http.ResponseWriter, r *http.Request) (kind Kind, body []byte, release func(), ref *refusal) {
	if r.Method != http.MethodPost {
		return "", nil, nil, refuse(http.StatusMethodNotAllowed, ReasonMalformed, "POST only")
	}
	if kind = Kind(strings.TrimPrefix(r.URL.Path, RPCPath)); !kind.known() {
		return "", nil, nil, refuse(http.StatusNotFound, ReasonMalformed, "unknown call")
	}
	a, ref := o.checkHeaders(kind, r.Header)
	if ref != nil {
		return "", nil, nil, ref
	}
	if r.ContentLength > maxBody {
		return "", nil, nil, refuse(http.StatusRequestEntityTooLarge, ReasonTooLarge, "a body of %d bytes is over the cap of %d", r.ContentLength, maxBody)
	}
	size := int64(maxBody)
	if r.ContentLength >= 0 {
		size = r.ContentLength
	}
	if o.inflight.Add(size) > maxInflightBody {
		o.inflight.Add(-size)
		return "", nil, nil, refuse(http.StatusServiceUnavailable, ReasonBusy, "too many bodies being read; try again")
	}
	release = func() { o.inflight.Add(-size) }
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, size))
	if err != nil {
		release()
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return "", nil, nil, refuse(http.StatusRequestEntityTooLarge, ReasonTooLarge, "the body is over %d bytes", size)
		}
		return "", nil, nil, refuse(http.StatusBadRequest, ReasonBadRequest, "reading the body: %v", err)
	}
	if ref := o.checkMAC(a, body); ref != nil {
		release()
		return "", nil, nil, ref
	}
	return kind, body, release, nil
}

// refused counts a refused call and logs it, at a bounded rate.
func (o *Origin) refused(r *http.Request, ref *refusal) {
	o.cfg.Observer.Refused(ref.reason)
	o.rpcLog.warn("cluster: peer call refused", "reason", string(ref.reason), "status", ref.status, "remote", r.RemoteAddr, "err", ref.msg)
}

// errBadRequest wraps the errors of an authenticated call's body.
var errBadRequest = errors.New("bad request")

// dispatch runs one authenticated call on this node's store.
func (o *Origin) dispatch(ctx context.Context, kind Kind, body []byte) (reply any, status int, err error) {
	switch kind {
	case KindLoad:
		return o.serveLoad(ctx, body)
	case KindApply:
		return o.serveApply(ctx, body)
	case KindDecide:
		return o.serveDecide(ctx, body)
	case KindDecides:
		return o.serveDecides(ctx, body)
	case KindSeed:
		return o.serveSeed(body)
	case KindAnalytics:
		return o.serveAnalytics(ctx, body)
	case KindWithdraw:
		return o.serveWithdraw(ctx, body)
	case KindLead:
		return o.serveLead(ctx, body)
	case KindNominate:
		return o.serveNominate(ctx, body)
	case KindNominated:
		return o.serveNominated(ctx, body)
	case KindImport:
		return o.serveImport(ctx, body)
	default:
		return nil, http.StatusNotFound, fmt.Errorf("cluster: unknown call %q", kind)
	}
}

// bad is the answer to an authenticated call of kind whose body is invalid.
func bad(kind Kind, format string, args ...any) (any, int, error) {
	return nil, http.StatusBadRequest, fmt.Errorf("cluster: %s: %w: %s", kind, errBadRequest, fmt.Sprintf(format, args...))
}

func (o *Origin) serveLoad(ctx context.Context, body []byte) (any, int, error) {
	var req loadRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad(KindLoad, "%v", err)
	}
	if !req.K.valid() {
		return bad(KindLoad, "invalid counter key")
	}
	c, err := o.localLoad(ctx, req.K.key(), req.S)
	if err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	o.seen.record(origin.Cell{Key: req.K.key(), Sequence: req.S}, c.Current, c.Imported.Current)
	o.seen.record(origin.Cell{Key: req.K.key(), Sequence: req.S - 1}, c.Previous, c.Imported.Previous)
	return toCountsReply(c), http.StatusOK, nil
}

// serveApply applies the deltas of the cells this node owns or stands in
// for, and refuses the others (see applyReply).
func (o *Origin) serveApply(ctx context.Context, body []byte) (any, int, error) {
	var req applyRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad(KindApply, "%v", err)
	}
	if len(req.D) > maxCallCells || len(req.Skip) > maxSkip {
		return bad(KindApply, "%d deltas and %d members skipped: at most %d and %d", len(req.D), len(req.Skip), maxCallCells, maxSkip)
	}
	skip, ring := setOf(req.Skip), o.Ring()
	reply := applyReply{T: make([]int64, len(req.D))}
	var deltas []origin.Delta
	var taken []int // index in req.D of each of deltas
	for i, d := range req.D {
		if !d.K.valid() {
			return bad(KindApply, "delta %d: invalid counter key", i)
		}
		if !o.serves(ring, d.K.key(), skip) {
			reply.Refused = append(reply.Refused, i)
			continue
		}
		deltas, taken = append(deltas, d.delta()), append(taken, i)
	}
	if len(deltas) > 0 {
		totals, err := o.localApply(ctx, deltas)
		if err != nil {
			return nil, http.StatusServiceUnavailable, err
		}
		for j, d := range deltas {
			reply.T[taken[j]] = totals[j].Count
			if totals[j].Imported != 0 {
				if reply.I == nil {
					reply.I = make([]int64, len(req.D))
				}
				reply.I[taken[j]] = totals[j].Imported
			}
			o.seen.recordWrite(d.Cell, totals[j].Count, totals[j].Imported, d.Writer, d.Sent)
		}
	}
	return reply, http.StatusOK, nil
}

func (o *Origin) serveDecide(ctx context.Context, body []byte) (any, int, error) {
	var req decideRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad(KindDecide, "%v", err)
	}
	if !req.K.valid() {
		return bad(KindDecide, "invalid counter key")
	}
	reply, err := o.decideHere(ctx, req.check())
	if err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	return reply, http.StatusOK, nil
}

// decideHere makes c's decision on this node's store for a peer.
func (o *Origin) decideHere(ctx context.Context, c origin.Check) (decideReply, error) {
	v, err := o.localDecide(ctx, c)
	if err != nil {
		return decideReply{}, err
	}
	o.seen.recordWrite(origin.Cell{Key: c.Key, Sequence: c.Seq}, v.Counts.Current, v.Counts.Imported.Current, c.Writer, v.Share)
	o.seen.record(origin.Cell{Key: c.Key, Sequence: c.Seq - 1}, v.Counts.Previous, v.Counts.Imported.Previous)
	return decideReply{A: v.Admitted, C: v.Counts.Current, P: v.Counts.Previous, IC: v.Counts.Imported.Current, IP: v.Counts.Imported.Previous, Stale: v.Stale, Share: v.Share}, nil
}

// serveSeed raises the cells this node owns or stands in for to their
// seeds, and refuses the others (see seedReply).
func (o *Origin) serveSeed(body []byte) (any, int, error) {
	var req seedRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad(KindSeed, "%v", err)
	}
	if len(req.D) > maxCallCells || len(req.Skip) > maxSkip {
		return bad(KindSeed, "%d seeds and %d members skipped: at most %d and %d", len(req.D), len(req.Skip), maxCallCells, maxSkip)
	}
	skip, ring := setOf(req.Skip), o.Ring()
	var reply seedReply
	seeds := make([]seed, 0, len(req.D))
	for i, w := range req.D {
		switch {
		case !w.K.valid() || len(w.Shares) > maxSeedShares:
			return bad(KindSeed, "seed %d: invalid counter key or over %d shares", i, maxSeedShares)
		case !o.serves(ring, w.K.key(), skip):
			reply.Refused = append(reply.Refused, i)
		default:
			seeds = append(seeds, w.seed())
		}
	}
	o.localSeed(seeds)
	for _, sd := range seeds {
		o.seen.recordSeed(sd)
	}
	return reply, http.StatusOK, nil
}

// serves reports whether this node decides key for a sender that routes
// around the members in skip (its open breakers): it owns key on ring, or
// it is the owner once skip is left out, standing in for the owner. A
// sender whose ring differs (a join or a departure this node or the sender
// has not seen yet) is refused, and sends again once the views agree.
func (o *Origin) serves(ring *Ring, key origin.Key, skip map[string]bool) bool {
	h := KeyHash(key)
	return ring.ownerOf(h) == o.cfg.ID || (len(skip) > 0 && ring.ownerSkipping(h, skip) == o.cfg.ID)
}

// setOf returns the set of ids.
func setOf(ids []string) map[string]bool {
	if len(ids) == 0 {
		return nil
	}
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}
