package cluster

import "time"

// Kind names a peer RPC, for metrics labels.
type Kind string

// The peer RPCs.
const (
	KindLoad   Kind = "load"   // read both cells of a counter at its owner
	KindApply  Kind = "apply"  // add a batch of coalesced deltas at their owner
	KindDecide Kind = "decide" // a strict-mode decision at the owner
	KindSeed   Kind = "seed"   // hand the new owner of moved cells the totals seen
	// KindDecides carries the strict-mode decisions of several counters
	// one owner holds, gathered while a call to it was on its way.
	KindDecides Kind = "decides"
	// KindAnalytics asks a peer for its decision analytics of one
	// namespace (see [Origin.ServeAnalytics]).
	KindAnalytics Kind = "analytics"
	// KindWithdraw withdraws the writer of a rolled-back batch's
	// reservation at the cell's owner.
	KindWithdraw Kind = "withdraw"
	// KindLead, KindNominate and KindNominated are the region's lease and
	// queue of nominations at the owner of the region's key, and
	// KindImport the other regions' counts the leader imports at a cell's
	// owner (see [Origin.Lead]).
	KindLead      Kind = "lead"
	KindNominate  Kind = "nominate"
	KindNominated Kind = "nominated"
	KindImport    Kind = "import"
)

// known reports whether k is one of the peer RPCs.
func (k Kind) known() bool {
	switch k {
	case KindLoad, KindApply, KindDecide, KindDecides, KindSeed, KindAnalytics, KindWithdraw,
		KindLead, KindNominate, KindNominated, KindImport:
		return true
	}
	return false
}

// Log sources, the values of [Observer.LogDropped]'s source.
const (
	// LogGossip: memberlist's log lines (a garbage packet to the gossip
	// port makes one).
	LogGossip = "gossip"
	// LogRPC: the lines about peer calls this node refused.
	LogRPC = "rpc"
)

// Outcome classifies how a peer RPC ended, for metrics labels.
type Outcome string

// The outcomes of a peer RPC.
const (
	OutcomeOK          Outcome = "ok"          // the owner answered
	OutcomeError       Outcome = "error"       // the owner refused the call (bad request, authentication)
	OutcomeTimeout     Outcome = "timeout"     // the deadline passed first
	OutcomeUnavailable Outcome = "unavailable" // the connection failed, or the owner failed
	OutcomeRejected    Outcome = "rejected"    // the peer's breaker is open: nothing was sent
	OutcomeCanceled    Outcome = "canceled"    // the caller gave up
)

// Observer receives the cluster's telemetry; `sluice serve` adapts it to
// Prometheus (sluice_cluster_*). Implementations must be safe for concurrent
// use and must not block.
type Observer interface {
	// RPC reports one peer RPC this node sent.
	RPC(kind Kind, outcome Outcome, elapsed time.Duration)
	// Members reports the number of live members, this node included.
	Members(n int)
	// RingChanged reports one change of the ring and the number of cells
	// this node handed to new owners because of it.
	RingChanged(seeded int)
	// BroadcastSent reports one exceed broadcast queued by this node.
	BroadcastSent()
	// BroadcastReceived reports one exceed broadcast received.
	BroadcastReceived()
	// Refused reports one peer call this node refused, and why.
	Refused(reason RefuseReason)
	// LogDropped reports one log line of source (LogGossip, LogRPC) not
	// written because the lines of that source came faster than its rate
	// limit allows.
	LogDropped(source string)
}

// NopObserver is an [Observer] that ignores everything.
type NopObserver struct{}

// RPC implements [Observer].
func (NopObserver) RPC(Kind, Outcome, time.Duration) {}

// Members implements [Observer].
func (NopObserver) Members(int) {}

// RingChanged implements [Observer].
func (NopObserver) RingChanged(int) {}

// BroadcastSent implements [Observer].
func (NopObserver) BroadcastSent() {}

// BroadcastReceived implements [Observer].
func (NopObserver) BroadcastReceived() {}

// Refused implements [Observer].
func (NopObserver) Refused(RefuseReason) {}

// LogDropped implements [Observer].
func (NopObserver) LogDropped(string) {}
