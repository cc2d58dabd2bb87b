package cluster

import (
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/origin"
)

// The JSON messages of the peer RPC and of the exceed broadcast. Field names
// are short: they cross the network for every batch.

// wireKey is a counter's key on the wire. A name that is not valid UTF-8
// (which JSON would change) travels as bytes (base64) in WB, NB or IB, its
// string field left empty, so that every key crosses the wire unchanged.
type wireKey struct {
	W  string `json:"w"`
	N  string `json:"n"`
	I  string `json:"i"`
	D  int64  `json:"d"` // ms
	WB []byte `json:"wb,omitempty"`
	NB []byte `json:"nb,omitempty"`
	IB []byte `json:"ib,omitempty"`
}

func toWireKey(k origin.Key) wireKey {
	w := wireKey{D: k.Duration.Milliseconds()}
	w.W, w.WB = wireName(k.Workspace)
	w.N, w.NB = wireName(k.Namespace)
	w.I, w.IB = wireName(k.Identifier)
	return w
}

// wireName returns s as a wireKey carries it: as a string if it is valid
// UTF-8, else as bytes.
func wireName(s string) (string, []byte) {
	if utf8.ValidString(s) {
		return s, nil
	}
	return "", []byte(s)
}

func (k wireKey) key() origin.Key {
	return origin.Key{Workspace: k.W + string(k.WB), Namespace: k.N + string(k.NB), Identifier: k.I + string(k.IB),
		Duration: time.Duration(k.D) * time.Millisecond}
}

// valid reports whether the key can name a counter that may cross the
// wire: a positive duration, at most MaxKeyBytes of names, and each name
// as a string or as bytes, not both.
func (k wireKey) valid() bool {
	n := len(k.W) + len(k.N) + len(k.I) + len(k.WB) + len(k.NB) + len(k.IB)
	both := (k.W != "" && k.WB != nil) || (k.N != "" && k.NB != nil) || (k.I != "" && k.IB != nil)
	return k.D > 0 && n <= MaxKeyBytes && !both
}

// keyBytes is the size of the names of k, which MaxKeyBytes bounds.
func keyBytes(k origin.Key) int { return len(k.Workspace) + len(k.Namespace) + len(k.Identifier) }

type wireDelta struct {
	K wireKey       `json:"k"`
	S int64         `json:"s"`
	W origin.Writer `json:"w"`
	N int64         `json:"n"` // the writer's sent count
}

func toWireDelta(d origin.Delta) wireDelta {
	return wireDelta{K: toWireKey(d.Cell.Key), S: d.Cell.Sequence, W: d.Writer, N: d.Sent}
}

func (d wireDelta) delta() origin.Delta {
	return origin.Delta{Cell: origin.Cell{Key: d.K.key(), Sequence: d.S}, Writer: d.W, Sent: d.N}
}

type loadRequest struct {
	K wireKey `json:"k"`
	S int64   `json:"s"`
}

// countsReply carries the totals of both cells and, when the region's
// leader imported other regions' counts into the owner (see Origin's
// [origin.Region]), their imported counts.
type countsReply struct {
	C  int64 `json:"c"`
	P  int64 `json:"p"`
	IC int64 `json:"ic,omitempty"`
	IP int64 `json:"ip,omitempty"`
}

func toCountsReply(c origin.Counts) countsReply {
	return countsReply{C: c.Current, P: c.Previous, IC: c.Imported.Current, IP: c.Imported.Previous}
}

func (r countsReply) counts() origin.Counts {
	return origin.Counts{Current: r.C, Previous: r.P, Imported: origin.Imported{Current: r.IC, Previous: r.IP}}
}

// applyRequest is a batch of deltas for cells the receiver owns, or stands
// in for: Skip names the members the sender routes around (their breaker
// is open there), so that the receiver can tell a stand-in's call from a
// misrouted one.
type applyRequest struct {
	D    []wireDelta `json:"d"`
	Skip []string    `json:"sk,omitempty"`
}

// applyReply carries the totals of the deltas taken, in order, and the
// indexes of those refused because the receiver neither owns their cell
// nor stands in for its owner (their totals are 0): the sender sends them
// again to whoever owns them then.
type applyReply struct {
	T       []int64 `json:"t"`
	Refused []int   `json:"r,omitempty"`
	// I carries the imported count of each delta's cell, in order, when
	// one is not zero (see [origin.Total]); an owner of a version before
	// the cluster's region leaves it out.
	I []int64 `json:"i,omitempty"`
}

type decideRequest struct {
	K    wireKey       `json:"k"`
	S    int64         `json:"s"`
	E    int64         `json:"e"`
	W    origin.Writer `json:"w"`
	Sent int64         `json:"sn"`
	IC   int64         `json:"ic"`
	IP   int64         `json:"ip"`
	Asks [][2]int64    `json:"a"` // limit, cost
	// A reservation (origin.Check.Holder) travels as a check of its
	// holder (W, with Sent 0), its writer and sent count in RW and RS: an
	// owner of a version before reservations decides it as the holder's
	// own check, whose units it keeps under the holder, not under the
	// node's writer, where they would hide the node's next admissions.
	RW origin.Writer `json:"rw,omitempty"`
	RS int64         `json:"rs,omitempty"`
}

func toDecideRequest(c origin.Check) decideRequest {
	r := decideRequest{K: toWireKey(c.Key), S: c.Seq, E: c.Elapsed, W: c.Writer, Sent: c.Sent, IC: c.Imported.Current, IP: c.Imported.Previous, Asks: make([][2]int64, len(c.Asks))}
	if c.Holder != 0 {
		r.W, r.Sent, r.RW, r.RS = c.Holder, 0, c.Writer, c.Sent
	}
	for i, a := range c.Asks {
		r.Asks[i] = [2]int64{a.Limit, a.Cost}
	}
	return r
}

func (r decideRequest) check() origin.Check {
	c := origin.Check{Key: r.K.key(), Seq: r.S, Elapsed: r.E, Writer: r.W, Sent: r.Sent, Imported: origin.Imported{Current: r.IC, Previous: r.IP}, Asks: make([]origin.Ask, len(r.Asks))}
	if r.RW != 0 {
		c.Writer, c.Sent, c.Holder = r.RW, r.RS, r.W
	}
	for i, a := range r.Asks {
		c.Asks[i] = origin.Ask{Limit: a[0], Cost: a[1]}
	}
	return c
}

type decideReply struct {
	A     []bool `json:"a"`
	C     int64  `json:"c"`
	P     int64  `json:"p"`
	IC    int64  `json:"ic,omitempty"` // imported, as in countsReply
	IP    int64  `json:"ip,omitempty"`
	Stale bool   `json:"st,omitempty"`
	Share int64  `json:"sh"`
}

// seedRequest carries the totals of cells that moved to the receiver, and
// the shares of the writers the sender knows: it raises each cell, and
// each share, to at least its value.
type seedRequest struct {
	D    []wireSeed `json:"d"`
	Skip []string   `json:"sk,omitempty"` // as in applyRequest
}

// seedReply carries the indexes of the seeds refused: cells the receiver
// neither owns nor stands in for.
type seedReply struct {
	Refused []int `json:"r,omitempty"`
}

type wireSeed struct {
	K      wireKey     `json:"k"`
	S      int64       `json:"s"`
	N      int64       `json:"n"`
	I      int64       `json:"i,omitempty"` // imported count; absent from a member of an earlier release
	Shares []wireShare `json:"w,omitempty"`
}

type wireShare struct {
	W origin.Writer `json:"w"`
	N int64         `json:"n"`
}

// toWireSeeds returns the wire form of sd: one wireSeed, or several of the
// same cell and total when it has more than maxSeedShares shares (a seed
// raises, so seeding a cell twice with parts of its shares is seeding it
// once with all of them).
func toWireSeeds(sd seed) []wireSeed {
	base := wireSeed{K: toWireKey(sd.Cell.Key), S: sd.Cell.Sequence, N: sd.Total, I: sd.Imported}
	out := []wireSeed{base}
	for writer, n := range sd.Shares {
		w := &out[len(out)-1]
		if len(w.Shares) == maxSeedShares {
			out = append(out, base)
			w = &out[len(out)-1]
		}
		w.Shares = append(w.Shares, wireShare{W: writer, N: n})
	}
	return out
}

func (w wireSeed) seed() seed {
	sd := seed{Cell: origin.Cell{Key: w.K.key(), Sequence: w.S}, Total: w.N, Imported: w.I, Shares: make(map[origin.Writer]int64, len(w.Shares))}
	for _, sh := range w.Shares {
		sd.Shares[sh.W] = max(sd.Shares[sh.W], sh.N)
	}
	return sd
}

// exceed is the broadcast of an owner that denied a request: the totals of
// the counter's current cell (S) and the one before it.
type exceed struct {
	K wireKey `json:"k"`
	S int64   `json:"s"`
	C int64   `json:"c"`
	P int64   `json:"p"`
}
