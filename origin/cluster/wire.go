package cluster

import (
	"time"

	"github.com/sluicehq/sluice/origin"
)

// The JSON messages of the peer RPC and of the exceed broadcast. Field names
// are short: they cross the network for every batch.

type wireKey struct {
	W string `json:"w"`
	N string `json:"n"`
	I string `json:"i"`
	D int64  `json:"d"` // ms
}

func toWireKey(k origin.Key) wireKey {
	return wireKey{W: k.Workspace, N: k.Namespace, I: k.Identifier, D: k.Duration.Milliseconds()}
}

func (k wireKey) key() origin.Key {
	return origin.Key{Workspace: k.W, Namespace: k.N, Identifier: k.I, Duration: time.Duration(k.D) * time.Millisecond}
}

// valid reports whether the key can name a counter.
func (k wireKey) valid() bool { return k.D > 0 }

type wireDelta struct {
	K wireKey `json:"k"`
	S int64   `json:"s"`
	N int64   `json:"n"`
}

func toWireDelta(d origin.Delta) wireDelta {
	return wireDelta{K: toWireKey(d.Cell.Key), S: d.Cell.Sequence, N: d.Count}
}

func (d wireDelta) delta() origin.Delta {
	return origin.Delta{Cell: origin.Cell{Key: d.K.key(), Sequence: d.S}, Count: d.N}
}

type loadRequest struct {
	K wireKey `json:"k"`
	S int64   `json:"s"`
}

type countsReply struct {
	C int64 `json:"c"`
	P int64 `json:"p"`
}

type applyRequest struct {
	D []wireDelta `json:"d"`
}

type applyReply struct {
	T []int64 `json:"t"`
}

type decideRequest struct {
	K       wireKey    `json:"k"`
	S       int64      `json:"s"`
	E       int64      `json:"e"`
	Pending int64      `json:"pn"`
	IC      int64      `json:"ic"`
	IP      int64      `json:"ip"`
	Asks    [][2]int64 `json:"a"` // limit, cost
}

func toDecideRequest(c origin.Check) decideRequest {
	r := decideRequest{K: toWireKey(c.Key), S: c.Seq, E: c.Elapsed, Pending: c.Pending, IC: c.Imported.Current, IP: c.Imported.Previous, Asks: make([][2]int64, len(c.Asks))}
	for i, a := range c.Asks {
		r.Asks[i] = [2]int64{a.Limit, a.Cost}
	}
	return r
}

func (r decideRequest) check() origin.Check {
	c := origin.Check{Key: r.K.key(), Seq: r.S, Elapsed: r.E, Pending: r.Pending, Imported: origin.Counts{Current: r.IC, Previous: r.IP}, Asks: make([]origin.Ask, len(r.Asks))}
	for i, a := range r.Asks {
		c.Asks[i] = origin.Ask{Limit: a[0], Cost: a[1]}
	}
	return c
}

type decideReply struct {
	A []bool `json:"a"`
	C int64  `json:"c"`
	P int64  `json:"p"`
}

// seedRequest carries totals of cells that moved to the receiver: it raises
// each cell to at least its total.
type seedRequest struct {
	D []wireDelta `json:"d"`
}

// exceed is the broadcast of an owner that denied a request: the totals of
// the counter's current cell (S) and the one before it.
type exceed struct {
	K wireKey `json:"k"`
	S int64   `json:"s"`
	C int64   `json:"c"`
	P int64   `json:"p"`
}
