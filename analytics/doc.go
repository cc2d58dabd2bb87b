// Package analytics answers "who is being limited, how often, since when"
// for every namespace, in bounded memory and at almost no cost to the
// request path.
//
// A [Recorder] keeps, per namespace (a workspace's namespace):
//
//   - passed and denied counts per second for the last hour (SecondSlots)
//     and per minute for the last day (MinuteSlots), in fixed-size rings;
//   - the top identifiers by requests and by denials over the last minute
//     and the last hour, from space-saving sketches of SketchSize counters,
//     one per 10-second (or 10-minute) bucket, merged when asked.
//
// Memory is bounded: at most MaxNamespaces namespaces are tracked one by
// one, each in at most BytesPerNamespace bytes plus the identifiers its
// sketches hold (at most 1,792, of at most MaxIdentifierBytes each);
// decisions of further namespaces are
// counted together in one aggregate ([Recorder.Other]), and a namespace
// idle for IdleAfter frees its slot.
//
// # Error bound of the top lists
//
// Over a window of N requests (or denials) of a namespace, every listed
// identifier has a Count at least its true count and at most Error above
// it, with Error ≤ N/SketchSize; an identifier with a true count above
// N/SketchSize is always among the candidates, so a true heavy hitter is
// never missed. TestZipfTopTen checks both against exact counts.
//
// # Cost and time
//
// [Recorder.Record] puts the decision on a bounded lock-free queue (one
// CAS and a store); [Recorder.Advance], called a few times a second by the
// embedder, applies it under a lock, as do Report and the other readers
// before they answer. Record never takes the lock and never applies the
// queue: a decision that finds the queue full is left out and counted
// ([Stats].Dropped), so a held-up Advance costs analytics, never the
// request that records. Identifiers are kept in at most
// [MaxIdentifierBytes]. The package starts no goroutine and reads no
// clock: every time is the caller's, so the same calls give the same
// answers.
package analytics
