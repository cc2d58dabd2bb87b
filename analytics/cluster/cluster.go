// Package cluster shares decision analytics between the nodes of a
// cluster-mode region (origin/cluster) that have no Redis: an answer
// ([Region.Report]) asks every other member, through the cluster's signed
// peer RPC, for what it holds of the namespace, and merges the replies with
// this node's analytics. Nothing is published ahead: an answer is as fresh
// as the members' own analytics (their record queues are applied every
// 100 ms), and takes at most the cluster's RPC timeout. A member that does
// not answer in time, or whose breaker is open, is left out and the answer
// covers the others; the failure is logged at most once a minute. A
// member's reply stays within cluster.MaxAnalyticsReply, what the asking
// node reads: if it would not, it leaves out its sketches' smallest
// counters, its counts still upper bounds of the true counts.
package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/analytics"
	"github.com/sluicehq/sluice/origin/cluster"
)

// ErrInvalidConfig is returned, wrapped with the reason, by [New].
var ErrInvalidConfig = errors.New("analytics/cluster: invalid config")

// errInvalidRequest is the error of a peer's request this node refuses.
var errInvalidRequest = errors.New("analytics/cluster: invalid request")

// maxNameBytes bounds a requested workspace or namespace, as the API
// bounds names.
const maxNameBytes = 512

// Peers is the part of *cluster.Origin a Region uses.
type Peers interface {
	ServeAnalytics(cluster.AnalyticsAnswer)
	AskPeers(ctx context.Context, req any, take func(json.RawMessage)) (answered, asked int)
}

var _ Peers = (*cluster.Origin)(nil)

// Config configures a [Region].
type Config struct {
	// Recorder holds this node's analytics. Required.
	Recorder *analytics.Recorder
	// Peers is the cluster origin of this node. Required.
	Peers Peers
	// Logger receives the members that did not answer. Default: discard.
	Logger *slog.Logger
}

// Region answers analytics for a cluster-mode region: this node's recorder
// and every other member's, asked at answer time. It implements
// server.Analytics.
type Region struct {
	cfg Config

	mu       sync.Mutex // guards warnedAt
	warnedAt time.Time
}

// New returns a Region and makes this node answer the others' analytics
// calls from cfg.Recorder.
func New(cfg Config) (*Region, error) {
	switch {
	case cfg.Recorder == nil:
		return nil, fmt.Errorf("%w: Recorder is nil", ErrInvalidConfig)
	case cfg.Peers == nil:
		return nil, fmt.Errorf("%w: Peers is nil", ErrInvalidConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Region{cfg: cfg}
	cfg.Peers.ServeAnalytics(r.answer)
	return r, nil
}

// Record records one decision in this node's recorder.
func (r *Region) Record(workspace, namespace, identifier string, passed bool, now time.Time) {
	r.cfg.Recorder.Record(workspace, namespace, identifier, passed, now)
}

// Namespaces returns the namespaces with analytics on this node (the
// console's list; a namespace that only other members saw is reached by
// name).
func (r *Region) Namespaces() []analytics.Key { return r.cfg.Recorder.Namespaces() }

// Report returns the region's analytics of workspace's namespace over iv
// ending at now: this node's and those of the members that answered.
func (r *Region) Report(workspace, namespace string, iv analytics.Interval, now time.Time) (analytics.Report, error) {
	if _, _, err := r.cfg.Recorder.PartOf(workspace, namespace, iv, now); err != nil {
		return analytics.Report{}, err // an invalid interval: nothing to ask
	}
	var parts []analytics.Part
	req := request{Workspace: workspace, Namespace: namespace, Interval: iv, Now: now.UnixMilli()}
	answered, asked := r.cfg.Peers.AskPeers(context.Background(), req, func(raw json.RawMessage) {
		var w wirePart
		if json.Unmarshal(raw, &w) == nil && w.Held {
			parts = append(parts, w.part())
		}
	})
	if answered < asked {
		r.warn("analytics: some cluster members did not answer; the answer covers the others", "answered", answered, "asked", asked)
	}
	return r.cfg.Recorder.ReportWith(workspace, namespace, iv, now, parts)
}

// warn logs at most once a minute.
func (r *Region) warn(msg string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.warnedAt) < time.Minute {
		return
	}
	r.warnedAt = time.Now()
	r.cfg.Logger.Warn(msg, args...)
}

// answer answers another member's analytics call from this node's
// recorder.
func (r *Region) answer(_ context.Context, body []byte) (any, error) {
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("%w: %w", errInvalidRequest, err)
	}
	if req.Totals != nil {
		return r.answerTotals(req)
	}
	if err := req.check(); err != nil {
		return nil, err
	}
	p, held, err := r.cfg.Recorder.PartOf(req.Workspace, req.Namespace, req.Interval, time.UnixMilli(req.Now))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errInvalidRequest, err)
	}
	w := wireOf(p, held)
	raw, err := w.encode(cluster.MaxAnalyticsReply)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(raw), nil
}

// request is an analytics call's body: one namespace's part over an
// interval or, when Totals is set, the last hour's totals of each of
// those namespaces (answered as a list of analytics.Counts; a member
// without this call refuses it for want of a namespace).
type request struct {
	Workspace string             `json:"workspace"`
	Namespace string             `json:"namespace"`
	Interval  analytics.Interval `json:"interval"`
	Now       int64              `json:"now"` // Unix ms
	Totals    []analytics.Key    `json:"totals,omitempty"`
}

func (q request) check() error {
	for _, s := range []string{q.Workspace, q.Namespace} {
		if len(s) > maxNameBytes || !utf8.ValidString(s) {
			return fmt.Errorf("%w: a name over %d bytes or not UTF-8", errInvalidRequest, maxNameBytes)
		}
	}
	if q.Namespace == "" {
		return fmt.Errorf("%w: no namespace", errInvalidRequest)
	}
	return nil
}

// wirePart is an analytics.Part as JSON: its top-list buckets as a list,
// since a JSON object's keys are strings.
type wirePart struct {
	Held    bool                       `json:"held"` // false: this member has nothing of the namespace
	Seconds map[int64]analytics.Counts `json:"seconds,omitempty"`
	Minutes map[int64]analytics.Counts `json:"minutes,omitempty"`
	Top     []wireTop                  `json:"top,omitempty"`
}

type wireTop struct {
	Key     analytics.TopKey  `json:"key"`
	Summary analytics.Summary `json:"summary"`
}

func wireOf(p analytics.Part, held bool) wirePart {
	w := wirePart{Held: held, Seconds: p.Seconds, Minutes: p.Minutes}
	for k, s := range p.Top {
		w.Top = append(w.Top, wireTop{Key: k, Summary: s})
	}
	return w
}

func (w wirePart) part() analytics.Part {
	p := analytics.Part{Seconds: w.Seconds, Minutes: w.Minutes, Top: make(map[analytics.TopKey]analytics.Summary, len(w.Top))}
	for _, t := range w.Top {
		p.Top[t.Key] = t.Summary
	}
	return p
}

// encode returns w as JSON in at most limit bytes. If it takes more, the
// smallest counters of its sketches are left out until it fits (see trim):
// the reply stays within what the asking node reads, its counts still
// bound the true counts, and its errors say how much looser they are.
func (w *wirePart) encode(limit int) ([]byte, error) {
	raw, err := json.Marshal(w)
	for err == nil && len(raw) > limit {
		if !w.trim(len(raw) - limit) {
			return nil, fmt.Errorf("analytics/cluster: a reply of %d bytes without its top lists, over the cap of %d", len(raw), limit)
		}
		raw, err = json.Marshal(w)
	}
	if err != nil {
		return nil, fmt.Errorf("analytics/cluster: encoding a reply: %w", err)
	}
	return raw, nil
}

// trim leaves out the smallest counters of w's sketches, smallest count
// first, until their JSON adds up to excess bytes, and raises each
// sketch's Min to the largest count it left out: Min stays the most an
// identifier the sketch does not list can have occurred, so a merge still
// counts at least the truth. It returns false if no counter was left.
func (w *wirePart) trim(excess int) bool {
	type counter struct {
		top, entry int
		count      uint64
	}
	var all []counter
	for i, t := range w.Top {
		for j, h := range t.Summary.Entries {
			all = append(all, counter{top: i, entry: j, count: h.Count})
		}
	}
	if len(all) == 0 {
		return false
	}
	slices.SortFunc(all, func(a, b counter) int { return cmp.Compare(a.count, b.count) })
	dropped := make([][]bool, len(w.Top))
	for i, t := range w.Top {
		dropped[i] = make([]bool, len(t.Summary.Entries))
	}
	for _, c := range all {
		if excess <= 0 {
			break
		}
		s := &w.Top[c.top].Summary
		b, _ := json.Marshal(s.Entries[c.entry]) // a Heavy always encodes
		excess -= len(b) + len(",")
		s.Min = max(s.Min, c.count)
		dropped[c.top][c.entry] = true
	}
	for i := range w.Top {
		s := &w.Top[i].Summary
		kept := s.Entries[:0]
		for j, h := range s.Entries {
			if !dropped[i][j] {
				kept = append(kept, h)
			}
		}
		s.Entries = kept
	}
	return true
}
