package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// The cluster's side of the global layer ([origin.Region]). The region's
// lease and its queue of nominations live at the owner of one fixed key,
// regionKey, on the ring (or its stand-in, as for any key): every node
// asks that member, so one node of the region at a time runs the global
// rounds and talks to the global store. The leader imports the other
// regions' counts of a cell into the cell's owner, which returns them with
// the cell's totals (Load, Apply, Decide), so every node learns them with
// its hydrations, replays and strict decisions.
//
// While the owner of regionKey runs an earlier release (it answers the
// region's calls 404), each member leads alone, as members of that release
// do: its lease and queue are its own store's.
//
// When regionKey moves to another member (a join, a departure, a breaker
// that opens), the new owner starts a new term: its lease is free, its
// queue empty. The next leader reads the global store from its start (a
// read again imports nothing twice: imports only raise) and the
// nominations queued at the old owner are lost, as those of a full queue
// are (a count is nominated again as it grows). Two leaders may run at
// once while members disagree on the ring; each round they run publishes
// and imports counts that only grow, so they cost work, not accuracy.

var _ origin.Region = (*Origin)(nil)

// regionKey is the key whose owner holds the region's lease and queue.
var regionKey = origin.Key{Namespace: "\x00sluice", Identifier: "region", Duration: time.Second}

// Bounds of the region's calls.
const (
	// maxHolderBytes bounds a lease holder's name (sluice's are its
	// region's name and 17 characters).
	maxHolderBytes = 256
	// maxImportRegions bounds the other regions' counts of one import.
	maxImportRegions = 256
	// maxRegionBytes bounds a region's name in an import.
	maxRegionBytes = 256
)

// errNotRegionOwner is the refusal of a region call at a member that does
// not hold the region's lease: the sender's ring differs (the next round
// asks again).
var errNotRegionOwner = errors.New("not the owner of the region's lease")

type leadRequest struct {
	H    string   `json:"h"`
	TTL  int64    `json:"ttl"` // ms
	R    int      `json:"r"`
	CC   int64    `json:"cc"`
	CD   int64    `json:"cd"`
	Skip []string `json:"sk,omitempty"` // as in applyRequest
}

type leaseReply struct {
	Held  bool   `json:"held,omitempty"`
	H     string `json:"h"`
	Since int64  `json:"since"`
	Fence int64  `json:"fence"`
	R     int    `json:"r"`
	CC    int64  `json:"cc"`
	CD    int64  `json:"cd"`
}

// wireNomination is an origin.Nomination on the wire.
type wireNomination struct {
	K wireKey `json:"k"`
	S int64   `json:"s"`
	C int64   `json:"c"`
	L int64   `json:"l,omitempty"`
	U int64   `json:"u,omitempty"`
}

// nominateRequest carries nominations for the region's queue, packed as
// the deltas of an apply call are.
type nominateRequest struct {
	D    []wireNomination `json:"d"`
	Skip []string         `json:"sk,omitempty"`
}

type nominatedRequest struct {
	Max  int      `json:"max"`
	Skip []string `json:"sk,omitempty"`
}

// nominatedReply carries the nominations taken, and whether the queue may
// hold more: the owner takes at most maxCallCells a call and puts back at
// the queue's end those that would take the reply over maxBody.
type nominatedReply struct {
	N    []wireNomination `json:"n"`
	More bool             `json:"more,omitempty"`
}

// wireImport is an origin.Import on the wire.
type wireImport struct {
	K wireKey           `json:"k"`
	S int64             `json:"s"`
	C []wireRegionCount `json:"c,omitempty"`
	U int64             `json:"u,omitempty"`
}

type wireRegionCount struct {
	R string `json:"r"`
	N int64  `json:"n"`
}

// importRequest carries imports of cells the receiver owns or stands in
// for; importReply the indexes of those it refused, as applyReply does.
type importRequest struct {
	D    []wireImport `json:"d"`
	Skip []string     `json:"sk,omitempty"`
}

type importReply struct {
	Refused []int `json:"r,omitempty"`
}

func toWireNomination(n origin.Nomination) wireNomination {
	return wireNomination{K: toWireKey(n.Cell.Key), S: n.Cell.Sequence, C: n.Count, L: n.Limit, U: n.Usage}
}

func (w wireNomination) nomination() origin.Nomination {
	return origin.Nomination{Cell: origin.Cell{Key: w.K.key(), Sequence: w.S}, Count: w.C, Limit: w.L, Usage: w.U}
}

func toWireImport(im origin.Import) wireImport {
	w := wireImport{K: toWireKey(im.Cell.Key), S: im.Cell.Sequence, U: im.Usage, C: make([]wireRegionCount, len(im.Counts))}
	for i, c := range im.Counts {
		w.C[i] = wireRegionCount{R: c.Region, N: c.Count}
	}
	return w
}

func (w wireImport) valid() bool {
	if !w.K.valid() || len(w.C) > maxImportRegions {
		return false
	}
	for _, c := range w.C {
		if len(c.R) > maxRegionBytes {
			return false
		}
	}
	return true
}

func (w wireImport) imported() origin.Import {
	im := origin.Import{Cell: origin.Cell{Key: w.K.key(), Sequence: w.S}, Usage: w.U, Counts: make([]origin.RegionCount, len(w.C))}
	for i, c := range w.C {
		im.Counts[i] = origin.RegionCount{Region: c.R, Count: c.N}
	}
	return im
}

// Lead takes or renews the region's lease at the owner of the region's
// key (see [origin.Region]).
func (o *Origin) Lead(ctx context.Context, r origin.LeaseRequest) (origin.Lease, error) {
	if err := o.checkOpen(); err != nil {
		return origin.Lease{}, err
	}
	if len(r.Holder) > maxHolderBytes {
		return origin.Lease{}, fmt.Errorf("cluster: lead: a holder of %d bytes is over the cap of %d", len(r.Holder), maxHolderBytes)
	}
	p := o.route(regionKey)
	if p == nil {
		return o.store.Lead(ctx, r)
	}
	req := leadRequest{H: r.Holder, TTL: r.TTL.Milliseconds(), R: r.Regions, CC: r.Cursors.Counts, CD: r.Cursors.Denials, Skip: o.view.Load().downIDs()}
	var reply leaseReply
	if err := o.call(ctx, p, KindLead, req, &reply); errors.Is(err, errUnknownCall) {
		return o.store.Lead(ctx, r) // an owner of an earlier release: lead alone
	} else if err != nil {
		return origin.Lease{}, err
	}
	return origin.Lease{Held: reply.Held, Holder: reply.H, Since: reply.Since, Fence: reply.Fence, Regions: reply.R,
		Cursors: origin.Cursors{Counts: reply.CC, Denials: reply.CD}}, nil
}

// Nominate queues ns at the owner of the region's key, in calls of at most
// maxCallCells nominations (see [origin.Region]).
func (o *Origin) Nominate(ctx context.Context, ns []origin.Nomination) error {
	if err := o.checkOpen(); err != nil {
		return err
	}
	for i, n := range ns {
		if err := checkKey(n.Cell.Key); err != nil {
			return fmt.Errorf("cluster: nominate: nomination %d: %w", i, err)
		}
	}
	p := o.route(regionKey)
	if p == nil {
		return o.store.Nominate(ctx, ns)
	}
	wire := make([]wireNomination, len(ns))
	for i, n := range ns {
		wire[i] = toWireNomination(n)
	}
	bodies, _, err := packAll(wire, o.view.Load().downIDs())
	if err != nil {
		return err
	}
	for i, body := range bodies {
		var reply struct{}
		if err := o.callBody(ctx, p, KindNominate, body, &reply); errors.Is(err, errUnknownCall) && i == 0 {
			return o.store.Nominate(ctx, ns) // an owner of an earlier release: this node leads alone
		} else if err != nil {
			return err
		}
	}
	return nil
}

// Nominated takes up to max nominations from the queue at the owner of
// the region's key (see [origin.Region]): from another member, in calls of
// at most maxCallCells, until it has max or the owner has no more. What
// earlier calls took is returned with a later call's error.
func (o *Origin) Nominated(ctx context.Context, max int) ([]origin.Nomination, error) {
	if err := o.checkOpen(); err != nil {
		return nil, err
	}
	p := o.route(regionKey)
	if p == nil {
		return o.store.Nominated(ctx, max)
	}
	var out []origin.Nomination
	for calls := 0; len(out) < max && calls < 2*(max/maxCallCells+1); calls++ {
		ask := min(max-len(out), maxCallCells)
		var reply nominatedReply
		if err := o.call(ctx, p, KindNominated, nominatedRequest{Max: ask, Skip: o.view.Load().downIDs()}, &reply); errors.Is(err, errUnknownCall) {
			local, err := o.store.Nominated(ctx, max-len(out)) // an owner of an earlier release: this node leads alone
			return append(out, local...), err
		} else if err != nil {
			return out, err
		}
		if len(reply.N) > ask {
			return out, fmt.Errorf("cluster: %s at %s: %w: %d nominations for %d asked", KindNominated, p.id, ErrRefused, len(reply.N), ask)
		}
		for _, w := range reply.N {
			out = append(out, w.nomination())
		}
		if !reply.More {
			break
		}
	}
	return out, nil
}

// Import raises the imported counts of each import's cell at the cell's
// owner, one batch per owner sent concurrently (see [origin.Region]). An
// owner that fails or refuses fails its cells alone: the error joins
// theirs, and the other cells are imported.
func (o *Origin) Import(ctx context.Context, imports []origin.Import) error {
	if err := o.checkOpen(); err != nil {
		return err
	}
	groups := map[*peer][]origin.Import{}
	for i, im := range imports {
		if err := checkKey(im.Cell.Key); err != nil {
			return fmt.Errorf("cluster: import %d: %w", i, err)
		}
		p := o.route(im.Cell.Key)
		groups[p] = append(groups[p], im)
	}
	errs := make([]error, 0, len(groups))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p, batch := range groups {
		wg.Go(func() {
			err := o.importAt(ctx, p, batch)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// importAt imports batch at p (nil: this node), in calls of at most
// maxCallCells imports and maxBody bytes.
func (o *Origin) importAt(ctx context.Context, p *peer, batch []origin.Import) error {
	if p == nil {
		o.seedMu.RLock()
		defer o.seedMu.RUnlock()
		return o.store.Import(ctx, batch)
	}
	wire := make([]wireImport, len(batch))
	for i, im := range batch {
		wire[i] = toWireImport(im)
	}
	bodies, _, err := packAll(wire, o.view.Load().downIDs())
	if err != nil {
		return err
	}
	var errs []error
	for _, body := range bodies {
		var reply importReply
		if err := o.callBody(ctx, p, KindImport, body, &reply); err != nil {
			errs = append(errs, err)
			continue
		}
		if len(reply.Refused) > 0 {
			errs = append(errs, fmt.Errorf("cluster: import at %s: %d cells: %w", p.id, len(reply.Refused), ErrNotOwner))
		}
	}
	return errors.Join(errs...)
}

// The owner's side.

// servesRegion reports whether this node holds the region's lease for a
// sender that routes around skip (see serves).
func (o *Origin) servesRegion(skip []string) bool {
	return o.serves(o.Ring(), regionKey, setOf(skip))
}

func (o *Origin) serveLead(ctx context.Context, body []byte) (any, int, error) {
	var req leadRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad(KindLead, "%v", err)
	}
	if req.H == "" || len(req.H) > maxHolderBytes || req.TTL <= 0 || len(req.Skip) > maxSkip {
		return bad(KindLead, "a holder of 1 to %d bytes, a positive TTL and at most %d members skipped are required", maxHolderBytes, maxSkip)
	}
	if !o.servesRegion(req.Skip) {
		return nil, http.StatusConflict, fmt.Errorf("cluster: %s: %w", KindLead, errNotRegionOwner)
	}
	l, err := o.store.Lead(ctx, origin.LeaseRequest{Holder: req.H, TTL: time.Duration(req.TTL) * time.Millisecond, Regions: req.R,
		Cursors: origin.Cursors{Counts: req.CC, Denials: req.CD}})
	if err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	return leaseReply{Held: l.Held, H: l.Holder, Since: l.Since, Fence: l.Fence, R: l.Regions, CC: l.Cursors.Counts, CD: l.Cursors.Denials}, http.StatusOK, nil
}

func (o *Origin) serveNominate(ctx context.Context, body []byte) (any, int, error) {
	var req nominateRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad(KindNominate, "%v", err)
	}
	if len(req.D) > maxCallCells || len(req.Skip) > maxSkip {
		return bad(KindNominate, "%d nominations and %d members skipped: at most %d and %d", len(req.D), len(req.Skip), maxCallCells, maxSkip)
	}
	if !o.servesRegion(req.Skip) {
		return nil, http.StatusConflict, fmt.Errorf("cluster: %s: %w", KindNominate, errNotRegionOwner)
	}
	ns := make([]origin.Nomination, len(req.D))
	for i, w := range req.D {
		if !w.K.valid() {
			return bad(KindNominate, "nomination %d: invalid counter key", i)
		}
		ns[i] = w.nomination()
	}
	if err := o.store.Nominate(ctx, ns); err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	return struct{}{}, http.StatusOK, nil
}

func (o *Origin) serveNominated(ctx context.Context, body []byte) (any, int, error) {
	var req nominatedRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad(KindNominated, "%v", err)
	}
	if req.Max < 0 || len(req.Skip) > maxSkip {
		return bad(KindNominated, "a negative max or over %d members skipped", maxSkip)
	}
	if !o.servesRegion(req.Skip) {
		return nil, http.StatusConflict, fmt.Errorf("cluster: %s: %w", KindNominated, errNotRegionOwner)
	}
	ask := min(req.Max, maxCallCells)
	ns, err := o.store.Nominated(ctx, ask)
	if err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	reply := nominatedReply{N: make([]wireNomination, 0, len(ns)), More: len(ns) == ask && ask > 0}
	size := 64 // the reply's braces, field names and flag
	for i, n := range ns {
		w := toWireNomination(n)
		b, err := json.Marshal(w)
		if err != nil || size+len(b)+1 > maxBody {
			// Put the rest back, at the queue's end: a nomination's
			// order does not matter (a leader keeps each cell's highest).
			if err := o.store.Nominate(ctx, ns[i:]); err != nil {
				return nil, http.StatusServiceUnavailable, err
			}
			reply.More = true
			break
		}
		size += len(b) + 1
		reply.N = append(reply.N, w)
	}
	return reply, http.StatusOK, nil
}

// serveImport imports the cells this node owns or stands in for, and
// refuses the others (see importReply).
func (o *Origin) serveImport(ctx context.Context, body []byte) (any, int, error) {
	var req importRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad(KindImport, "%v", err)
	}
	if len(req.D) > maxCallCells || len(req.Skip) > maxSkip {
		return bad(KindImport, "%d imports and %d members skipped: at most %d and %d", len(req.D), len(req.Skip), maxCallCells, maxSkip)
	}
	skip, ring := setOf(req.Skip), o.Ring()
	var reply importReply
	imports := make([]origin.Import, 0, len(req.D))
	for i, w := range req.D {
		switch {
		case !w.valid():
			return bad(KindImport, "import %d: invalid counter key, or over %d regions or %d bytes of a region's name", i, maxImportRegions, maxRegionBytes)
		case !o.serves(ring, w.K.key(), skip):
			reply.Refused = append(reply.Refused, i)
		default:
			imports = append(imports, w.imported())
		}
	}
	o.seedMu.RLock()
	err := o.store.Import(ctx, imports)
	o.seedMu.RUnlock()
	if err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	return reply, http.StatusOK, nil
}
