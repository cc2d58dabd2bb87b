package server

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// Reasons of a failed authentication, the values of the reason label of
// sluice_auth_failures_total.
const (
	// AuthMissing: no Authorization header, not a Bearer one, or an empty
	// token.
	AuthMissing = "missing"
	// AuthUnknownKey: a bearer token that matches no configured root key.
	AuthUnknownKey = "unknown_key"
)

// authLogInterval is the shortest time between two log lines about failed
// authentications; the failures in between are counted in the next line.
const authLogInterval = time.Second

// authFailures counts failed authentications and logs them at a bounded rate
// (one line per authLogInterval at most, carrying the number of failures not
// logged since the previous line), so that a client retrying a wrong key, or
// an attacker guessing keys, cannot flood the log. It never logs the
// presented token. Lock-free: a flood of failures does not serialise
// requests.
type authFailures struct {
	log        *slog.Logger
	metrics    *Metrics // nil: not counted
	now        func() time.Time
	last       atomic.Int64 // Unix nanoseconds of the last line logged; 0 before the first
	suppressed atomic.Int64 // failures not logged since the last line
}

func newAuthFailures(log *slog.Logger, m *Metrics) *authFailures {
	return &authFailures{log: log, metrics: m, now: time.Now}
}

// record counts one failed authentication and logs it unless a line was
// logged less than authLogInterval ago. remote is the client's address,
// requestID the request's id.
func (a *authFailures) record(reason, endpoint, remote, requestID string) {
	if a.metrics != nil {
		a.metrics.authFailed(reason)
	}
	now := a.now().UnixNano()
	last := a.last.Load()
	if (last != 0 && now-last < int64(authLogInterval)) || !a.last.CompareAndSwap(last, now) {
		a.suppressed.Add(1)
		return
	}
	a.log.Warn("server: authentication failed", "reason", reason, "endpoint", endpoint, "remote", remote,
		"requestId", requestID, "suppressed", a.suppressed.Swap(0))
}
