// Package client is the Go client of a Sluice server's HTTP API (Unkey's v2
// rate-limit endpoints): decisions with [Client.Limit] and
// [Client.MultiLimit], usage reported after the fact (Sluice's own
// ratelimit.report and multiReport) with [Client.Report] and
// [Client.MultiReport], and overrides with [Client.SetOverride],
// [Client.GetOverride], [Client.ListOverrides] and [Client.DeleteOverride].
//
// A denial is not an error: it is a [LimitResponse] whose Success is false.
// An error is either the API's answer to a request it refused, an
// [*APIError] (check with errors.As; [ErrNotFound] and [ErrUnauthorized]
// match the common ones with errors.Is), or a failure to get an answer at
// all, which wraps the transport's or the context's error
// (errors.Is(err, context.DeadlineExceeded) works).
//
// # Connections
//
// By default the client owns a tuned [http.Transport]: connections are kept
// and reused (up to 64 idle ones to the server), and HTTP/2 is negotiated
// over TLS, so concurrent calls share few connections. [WithHTTPClient]
// replaces it with the caller's client; [WithTLSConfig] sets the TLS
// configuration of the default transport (a private CA, a client
// certificate). Every call honours its context's deadline; [WithTimeout]
// bounds calls whose context has none (10 s by default).
//
// # Retries
//
// A retried call must not count twice, so the client retries only what
// cannot have been counted, or what counts the same however often it
// arrives:
//
//   - Every call, the counting ones (Limit, MultiLimit, Report,
//     MultiReport) included, is retried when the connection could not be
//     made (a dial error: connection refused, no route, DNS). The request
//     never left, so nothing was counted.
//   - GetOverride and ListOverrides (reads), and SetOverride and
//     DeleteOverride (idempotent: they set or delete the override of one
//     namespace and identifier, and doing so twice leaves what doing it
//     once does), are also retried on any other transport error (a reset
//     connection, a timeout before the answer) and on the answers 502, 503
//     and 504.
//   - Limit, MultiLimit, Report and MultiReport are never retried once a
//     connection was made: the request may have reached the server and
//     been counted, even when no answer came back or a proxy answered 502,
//     503 or 504. The error is returned; the caller decides (an HTTP
//     middleware typically fails open; a lost report is under-counted
//     rather than counted twice).
//
// A DeleteOverride whose earlier attempt may have reached the server and
// whose retry finds no override (404) reports success: the earlier attempt
// deleted it. Nothing else is retried: a 4xx answer, a 500, a TLS
// certificate error, a response that is not the API's JSON.
//
// Retries are bounded ([RetryPolicy.MaxAttempts], 3 attempts by default)
// and spaced by exponential backoff with jitter (50 ms, then 100 ms, ... at
// most 1 s, each between half and all of that), never past the call's
// deadline: when the next attempt could not start before it, the last
// error is returned at once. [WithRetry] configures it; MaxAttempts 1 turns
// retries off.
package client
