package cluster

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/sluicehq/sluice/origin"
)

// withdrawRequest asks the owner of a cell to withdraw one writer of it.
type withdrawRequest struct {
	K wireKey       `json:"k"`
	S int64         `json:"s"`
	W origin.Writer `json:"w"`
}

// Withdraw has the owner of c take writer w's share out of c and mark w
// withdrawn there (see [origin.Origin]). The mark is also kept with the
// cell's seen shares, so a new owner seeded from this node after a ring
// change keeps the writer withdrawn.
func (o *Origin) Withdraw(ctx context.Context, c origin.Cell, w origin.Writer) error {
	if err := o.checkOpen(); err != nil {
		return err
	}
	if err := checkKey(c.Key); err != nil {
		return err
	}
	if p := o.route(c.Key); p == nil {
		if err := o.localWithdraw(ctx, c, w); err != nil {
			return err
		}
	} else {
		var reply struct{}
		req := withdrawRequest{K: toWireKey(c.Key), S: c.Sequence, W: w}
		if err := o.call(ctx, p, KindWithdraw, req, &reply); err != nil {
			return err
		}
	}
	o.seen.recordWrite(c, 0, 0, w, origin.Withdrawn)
	return nil
}

// localWithdraw withdraws w from c in this node's store.
func (o *Origin) localWithdraw(ctx context.Context, c origin.Cell, w origin.Writer) error {
	o.seedMu.RLock()
	defer o.seedMu.RUnlock()
	return o.store.Withdraw(ctx, c, w)
}

// serveWithdraw withdraws a writer of a cell this node owns, for a peer.
func (o *Origin) serveWithdraw(ctx context.Context, body []byte) (any, int, error) {
	var req withdrawRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad(KindWithdraw, "%v", err)
	}
	if !req.K.valid() {
		return bad(KindWithdraw, "invalid counter key")
	}
	c := origin.Cell{Key: req.K.key(), Sequence: req.S}
	if err := o.localWithdraw(ctx, c, req.W); err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	o.seen.recordWrite(c, 0, 0, req.W, origin.Withdrawn)
	return struct{}{}, http.StatusOK, nil
}
