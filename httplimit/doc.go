// Package httplimit is HTTP middleware that rate-limits an [http.Handler]
// with Sluice: deciding in the process with a *sluice.Limiter ([Embedded])
// or asking a Sluice server with a *client.Client ([Remote]), behind the
// one-method [Limiter] interface.
//
// Each request gets a [Policy] (Config.Policy, or Config.PolicyFunc per
// route), a key (Config.Key: [ClientIP] by default, [Header], or any
// [KeyFunc]) and a cost (Config.Cost, 1 by default). The policy's name is
// the namespace of its counters, so routes under different policies never
// share a count.
//
// # Answers
//
// Every decided request's answer carries the two fields of
// draft-ietf-httpapi-ratelimit-headers-11 (May 2026; the structured-field
// form the draft has had since -07):
//
//	RateLimit-Policy: "default";q=100;w=60
//	RateLimit: "default";r=42;t=17
//
// q is the limit applied, w the window in seconds, r what remains and t the
// seconds until the current window cell ends (both rounded up). A denied
// request is answered 429 Too Many Requests with Retry-After: the seconds
// until the same request passes if the key spends nothing meanwhile, which
// for Sluice's sliding window is past t, since the usage of a window fades
// through the next one (see [Result.RetryAfter]).
//
// # Usage known after the handler ran
//
// A cost known only once the request was served, the tokens of a language
// model's answer, is added by the handler with [AddUsage]; the middleware
// reports it on the request's counter when the handler returns
// ([Reporter]: [Embedded] and [Remote] are). A report is never denied and
// counts whole, even past the limit, so the key's next requests are
// denied until the window lets them through. Config.Cost is then what the
// request is known to spend before it runs: 0 (a peek: the request passes
// while anything is left) or a small estimate.
//
// # Failures
//
// When the limiter fails (an error, not a denial), the middleware fails
// open by default: the request is served, without rate-limit fields.
// Config.FailClosed refuses it with 503 instead. Either way Config.OnError
// sees the error. A request without a key (a missing header) is refused
// with 400 whatever the mode: withholding a key must not escape the limit.
//
// # Client addresses behind proxies
//
// [TrustedProxies] finds the client's address safely: the forwarding
// header (X-Forwarded-For, or RFC 7239's Forwarded; one, chosen by the
// operator) is read from the right, and only the hops appended by trusted
// proxies count. A peer that is not a trusted proxy is the client, whatever
// headers it sends.
//
// gRPC servers get the same limits, fields and policies from the
// interceptors of httplimit/grpclimit; this package does not link gRPC.
package httplimit
