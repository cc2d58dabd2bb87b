package cluster

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice/internal/breaker"
	"github.com/sluicehq/sluice/origin"
)

// RPCPath is the path prefix of the peer RPC on a node's HTTP port; a call
// is a POST of JSON to RPCPath+kind.
const RPCPath = "/sluice.cluster.v1/"

// authHeader carries "<unix ms>.<nonce>.<hex HMAC-SHA256>" of a call: the
// nonce, 16 random hex digits, makes each call unique, so that a receiver
// takes a signed call once (see replays).
const authHeader = "Sluice-Cluster-Auth"

// maxSkew is how far a call's timestamp may be from the receiver's clock.
const maxSkew = time.Minute

// maxBody bounds a peer RPC body.
const maxBody = 8 << 20

// rpcKey derives the HMAC key of the peer RPC from the cluster secret. The
// gossip key is derived differently (gossipKey), so one never reveals the
// other.
func rpcKey(secret string) []byte {
	sum := sha256.Sum256([]byte("sluice cluster rpc\x00" + secret))
	return sum[:]
}

// sign returns the MAC of a call of kind at ts (unix ms) with nonce and
// body.
func sign(key []byte, kind Kind, ts, nonce string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, part := range []string{string(kind), ts, nonce} {
		m.Write([]byte(part))
		m.Write([]byte{'\n'})
	}
	m.Write(body)
	return m.Sum(nil)
}

// authValue returns the authHeader value of a call of kind with body at ts
// (unix ms), with a fresh nonce.
func authValue(key []byte, kind Kind, ts int64, body []byte) string {
	var n [8]byte
	_, _ = rand.Read(n[:]) // crypto/rand.Read never fails
	nonce, at := hex.EncodeToString(n[:]), strconv.FormatInt(ts, 10)
	return at + "." + nonce + "." + hex.EncodeToString(sign(key, kind, at, nonce, body))
}

// peer is another member and the breaker of the calls to it.
type peer struct {
	id, base string
	breaker  *gobreaker.CircuitBreaker[struct{}]
}

func (o *Origin) newPeer(id, base string) *peer {
	b := o.cfg.Breaker
	return &peer{id: id, base: strings.TrimRight(base, "/"), breaker: breaker.New(breaker.Settings{
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
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	start := time.Now()
	_, err = p.breaker.Execute(func() (struct{}, error) {
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

func (o *Origin) post(ctx context.Context, p *peer, kind Kind, body []byte, reply any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+RPCPath+string(kind), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(authHeader, authValue(o.key, kind, o.cfg.Clock().UnixMilli(), body))
	res, err := o.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxBody))
	if err != nil {
		return err
	}
	switch {
	case res.StatusCode == http.StatusOK:
		if err := json.Unmarshal(raw, reply); err != nil {
			return fmt.Errorf("%w: bad reply: %w", ErrRefused, err)
		}
		return nil
	case res.StatusCode >= 500:
		return fmt.Errorf("%w: status %d: %s", ErrPeer, res.StatusCode, bytes.TrimSpace(raw))
	default:
		return fmt.Errorf("%w: status %d: %s", ErrRefused, res.StatusCode, bytes.TrimSpace(raw))
	}
}

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
// node's HTTP port. Calls must carry a valid HMAC of the cluster secret; a
// root key does not reach it.
func (o *Origin) Handler() (string, http.Handler) {
	return RPCPath, http.HandlerFunc(o.serveRPC)
}

func (o *Origin) serveRPC(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "cluster: POST only", http.StatusMethodNotAllowed)
		return
	}
	kind := Kind(strings.TrimPrefix(r.URL.Path, RPCPath))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, "cluster: reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := o.verify(kind, r.Header.Get(authHeader), body); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	if o.closed.Load() {
		http.Error(w, ErrClosed.Error(), http.StatusServiceUnavailable)
		return
	}
	reply, status, err := o.dispatch(r.Context(), kind, body)
	if err != nil {
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

// errAuth is the answer to a call without a valid MAC.
var errAuth = errors.New("cluster: peer call not authenticated")

// verify checks the timestamp and the MAC of a call, then that its nonce
// was not taken before.
func (o *Origin) verify(kind Kind, header string, body []byte) error {
	parts := strings.Split(header, ".")
	if len(parts) != 3 || len(parts[1]) != 16 {
		return errAuth
	}
	ts, nonce, mac := parts[0], parts[1], parts[2]
	at, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errAuth
	}
	now := o.cfg.Clock()
	if skew := now.Sub(time.UnixMilli(at)); skew > maxSkew || skew < -maxSkew {
		return fmt.Errorf("%w: timestamp %v away", errAuth, skew.Round(time.Second))
	}
	got, err := hex.DecodeString(mac)
	if err != nil || !hmac.Equal(got, sign(o.key, kind, ts, nonce, body)) {
		return errAuth
	}
	if !o.replays.claim(at, nonce, now.UnixMilli()) {
		return fmt.Errorf("%w: a replayed call", errAuth)
	}
	return nil
}

// dispatch runs one authenticated call on this node's store.
func (o *Origin) dispatch(ctx context.Context, kind Kind, body []byte) (reply any, status int, err error) {
	bad := func(err error) (any, int, error) {
		return nil, http.StatusBadRequest, fmt.Errorf("cluster: %s: %w", kind, err)
	}
	switch kind {
	case KindLoad:
		var req loadRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return bad(fmt.Errorf("bad request: %w", err))
		}
		if !req.K.valid() {
			return bad(errors.New("bad request: invalid counter key"))
		}
		c, err := o.localLoad(ctx, req.K.key(), req.S)
		if err != nil {
			return nil, http.StatusServiceUnavailable, err
		}
		o.seen.record(origin.Cell{Key: req.K.key(), Sequence: req.S}, c.Current)
		o.seen.record(origin.Cell{Key: req.K.key(), Sequence: req.S - 1}, c.Previous)
		return countsReply{C: c.Current, P: c.Previous}, http.StatusOK, nil
	case KindApply:
		var req applyRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return bad(err)
		}
		deltas := make([]origin.Delta, len(req.D))
		for i, d := range req.D {
			if !d.K.valid() {
				return bad(errors.New("bad duration"))
			}
			deltas[i] = d.delta()
		}
		totals, err := o.localApply(ctx, deltas)
		if err != nil {
			return nil, http.StatusServiceUnavailable, err
		}
		for i, d := range deltas {
			o.seen.record(d.Cell, totals[i])
		}
		return applyReply{T: totals}, http.StatusOK, nil
	case KindDecide:
		var req decideRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return bad(fmt.Errorf("bad request: %w", err))
		}
		if !req.K.valid() {
			return bad(errors.New("bad request: invalid counter key"))
		}
		c := req.check()
		v, err := o.localDecide(ctx, c)
		if err != nil {
			return nil, http.StatusServiceUnavailable, err
		}
		o.seen.record(origin.Cell{Key: c.Key, Sequence: c.Seq}, v.Counts.Current)
		o.seen.record(origin.Cell{Key: c.Key, Sequence: c.Seq - 1}, v.Counts.Previous)
		return decideReply{A: v.Admitted, C: v.Counts.Current, P: v.Counts.Previous}, http.StatusOK, nil
	case KindSeed:
		var req seedRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return bad(err)
		}
		cells := make([]origin.Delta, 0, len(req.D))
		for _, d := range req.D {
			if d.K.valid() {
				cells = append(cells, d.delta())
			}
		}
		if err := o.localSeed(ctx, cells); err != nil {
			return nil, http.StatusServiceUnavailable, err
		}
		for _, d := range cells {
			o.seen.record(d.Cell, d.Count)
		}
		return struct{}{}, http.StatusOK, nil
	default:
		return nil, http.StatusNotFound, fmt.Errorf("cluster: unknown call %q", kind)
	}
}
