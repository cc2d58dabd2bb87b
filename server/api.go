package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// limitData is V2RatelimitLimitResponseData.
type limitData struct {
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	Reset      int64  `json:"reset"`
	Success    bool   `json:"success"`
	OverrideID string `json:"overrideId,omitempty"`
}

// checkData is V2RatelimitMultiLimitCheck.
type checkData struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	Reset      int64  `json:"reset"`
	Passed     bool   `json:"passed"`
	OverrideID string `json:"overrideId,omitempty"`
}

// multiData is V2RatelimitMultiLimitResponseData.
type multiData struct {
	Passed bool        `json:"passed"`
	Limits []checkData `json:"limits"`
}

// overrideData is RatelimitOverride.
type overrideData struct {
	OverrideID string `json:"overrideId"`
	Duration   int64  `json:"duration"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
}

func toOverrideData(o store.Override) overrideData {
	return overrideData{OverrideID: o.ID, Duration: o.Duration.Milliseconds(), Identifier: o.Identifier, Limit: o.Limit}
}

// request turns a decoded limit body into a library request: it resolves
// the namespace (creating it on first use, in the background) and applies
// the most specific override, whose limit and duration replace the
// request's. The counter is keyed by the namespace's name, so addressing it
// by ID or by name counts alike. A namespace that is not known yet, or that
// a slow or failing store has not created within a short wait, has no
// overrides: the request is decided under the name it gave.
func (s *Server) request(c *call, in limitInput) (sluice.Request, string, *apiError) {
	r := sluice.Request{
		Workspace:  c.workspace,
		Namespace:  in.Namespace,
		Identifier: in.Identifier,
		Limit:      in.Limit,
		Duration:   time.Duration(in.Duration) * time.Millisecond,
		Cost:       in.Cost,
	}
	ns, ok, e := s.namespaces.forLimit(c.ctx, &c.namespaceWait, c.workspace, in.Namespace)
	if !ok {
		return r, "", e
	}
	r.Namespace = ns.Name
	o, ok := s.cfg.Catalog.Match(ns.ID, in.Identifier)
	if !ok {
		return r, "", nil
	}
	r.Limit, r.Duration = o.Limit, o.Duration
	return r, o.ID, nil
}

// limiterError maps a limiter error to a response.
func limiterError(err error, loc string) *apiError {
	switch {
	case errors.Is(err, sluice.ErrInvalidRequest):
		return badRequest([]FieldError{{Location: loc, Message: err.Error()}})
	case errors.Is(err, sluice.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return unavailable("The limiter is not available (shutting down, or the request was cut); retry later.", err)
	default:
		return internalError(err)
	}
}

func (s *Server) limit(c *call) *apiError { return s.one(c, s.cfg.Limiter.Ratelimit, false) }

// report is ratelimit.report: the body of ratelimit.limit, counted as
// usage after the fact (sluice.Limiter.Report) and answered like it.
func (s *Server) report(c *call) *apiError { return s.one(c, s.cfg.Limiter.Report, true) }

// one serves a limit or report body with call (Ratelimit or Report).
// Reports count in the metrics as outcome "reported" and are no decisions
// for the analytics.
func (s *Server) one(c *call, call func(context.Context, sluice.Request) (sluice.Response, error), report bool) *apiError {
	in, es := decodeLimit(c.body)
	if len(es) > 0 {
		return badRequest(es)
	}
	req, overrideID, e := s.request(c, in)
	if e != nil {
		return e
	}
	res, err := call(c.ctx, req)
	if err != nil {
		return limiterError(err, "body")
	}
	s.record(c, req, res.Success, report)
	if span := c.span; span != nil {
		span.SetAttributes(AttrNamespace.String(req.Namespace), AttrSuccess.Bool(res.Success))
		if overrideID != "" {
			span.SetAttributes(AttrOverrideID.String(overrideID))
		}
	}
	data := limitData{
		Limit:      res.Limit,
		Remaining:  res.Remaining,
		Reset:      res.Reset.UnixMilli(),
		Success:    res.Success,
		OverrideID: overrideID,
	}
	c.data = data.appendJSON(c.data)
	return nil
}

// record counts a decision (or a report) in the metrics and the analytics.
func (s *Server) record(c *call, req sluice.Request, passed, report bool) {
	m := s.cfg.Metrics
	if report {
		if m != nil {
			m.reported(req.Namespace)
		}
		return
	}
	if m != nil {
		m.decision(req.Namespace, passed)
	}
	if a := s.cfg.Analytics; a != nil {
		a.Record(c.workspace, req.Namespace, req.Identifier, passed, c.start)
	}
}

func (s *Server) multiLimit(c *call) *apiError { return s.many(c, s.cfg.Limiter.RatelimitMany, false) }

// multiReport is ratelimit.multiReport: the body of ratelimit.multiLimit,
// every element counted as usage after the fact
// (sluice.Limiter.ReportMany) and answered like multiLimit (passed is
// always true).
func (s *Server) multiReport(c *call) *apiError { return s.many(c, s.cfg.Limiter.ReportMany, true) }

// many serves a multiLimit or multiReport body with call (RatelimitMany or
// ReportMany).
func (s *Server) many(c *call, call func(context.Context, []sluice.Request) ([]sluice.Response, error), report bool) *apiError {
	ins, es := decodeMultiLimit(c.body)
	if len(es) > 0 {
		return badRequest(es)
	}
	reqs := make([]sluice.Request, len(ins))
	overrideIDs := make([]string, len(ins))
	for i, in := range ins {
		var e *apiError
		reqs[i], overrideIDs[i], e = s.request(c, in)
		if e != nil {
			return e
		}
	}
	res, err := call(c.ctx, reqs)
	if err != nil {
		return limiterError(err, "body")
	}
	out := multiData{Passed: true, Limits: make([]checkData, len(res))}
	for i, r := range res {
		out.Passed = out.Passed && r.Success
		out.Limits[i] = checkData{
			Namespace:  ins[i].Namespace,
			Identifier: ins[i].Identifier,
			Limit:      r.Limit,
			Remaining:  r.Remaining,
			Reset:      r.Reset.UnixMilli(),
			Passed:     r.Success,
			OverrideID: overrideIDs[i],
		}
		s.record(c, reqs[i], r.Success, report)
	}
	if span := c.span; span != nil {
		span.SetAttributes(AttrChecks.Int(len(reqs)), AttrSuccess.Bool(out.Passed))
	}
	c.data = out.appendJSON(c.data)
	return nil
}

// TypeStoreLimit is the problem type of a write refused by a bound on
// growth: --max-namespaces per workspace, --max-overrides per namespace
// (store.ErrLimitReached).
const TypeStoreLimit = "urn:sluice:error:store_limit_reached"

// storeError maps a store error: ErrNotFound becomes notFound, an
// unreachable store or shutdown a 503, a store bound a 403, anything else a
// 500. A 5xx names no host or query: the store's error is logged, not sent.
//
// A bound is answered 403, as Unkey's API answers a request it will not
// serve whoever retries it: setOverride documents 400, 401, 403, 404 and 500
// only, so the Unkey SDKs decode a 403 into their typed error, where a 409
// or a 429 would be undocumented (and a 429 reads as "retry later", which
// cannot help).
func storeError(err error, notFound *apiError) *apiError {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound
	case errors.Is(err, store.ErrClosed):
		return unavailable("The server is shutting down.", err)
	case errors.Is(err, store.ErrUnavailable):
		return unavailable("The override store is unreachable, so namespaces and overrides cannot be changed or read from it now; rate-limit decisions continue with the overrides this node already has. Retry later; the error is logged with this request's id.", err)
	case errors.Is(err, store.ErrLimitReached):
		return limitError(err)
	default:
		return internalError(err)
	}
}

// limitError is the 403 of a write refused by a bound of the store; it
// names the bound and its value.
func limitError(err error) *apiError {
	var le *store.LimitError
	if !errors.As(err, &le) {
		e := newError(http.StatusForbidden, TypeStoreLimit, "The store refused to grow: "+err.Error()+".")
		e.Errors = []FieldError{{Location: "body", Message: err.Error(), Fix: "Delete overrides the namespace no longer needs."}}
		return e
	}
	if le.Bound == store.BoundNamespaces {
		return namespaceLimit(le.Max)
	}
	n := strconv.Itoa(le.Max)
	e := newError(http.StatusForbidden, TypeStoreLimit, "This namespace has "+n+" overrides, as many as it may have (--max-overrides); a new identifier or pattern cannot be added, an existing one can be replaced.")
	e.Errors = []FieldError{{Location: "body.identifier", Message: "would create an override beyond the namespace's limit of " + n, Fix: "Replace or delete an override of this namespace, or raise --max-overrides."}}
	return e
}

func namespaceNotFound(ns string) *apiError {
	return newError(http.StatusNotFound, TypeNamespaceNotFound, "This workspace has no namespace with the id or name "+quote(ns)+".")
}

func overrideNotFound(identifier string) *apiError {
	return newError(http.StatusNotFound, TypeOverrideNotFound, "The namespace has no override for the identifier "+quote(identifier)+".")
}

// quote returns s, as echo repeats it, in double quotes.
func quote(s string) string { return "\"" + echo(s) + "\"" }

func (s *Server) setOverride(c *call) *apiError {
	in, es := decodeSetOverride(c.body)
	if len(es) > 0 {
		return badRequest(es)
	}
	ns, e := s.namespaces.ensure(c.ctx, c.workspace, in.Namespace)
	if e != nil {
		return e
	}
	o, err := s.cfg.Catalog.SetOverride(c.ctx, store.Override{
		Workspace:   c.workspace,
		NamespaceID: ns.ID,
		Identifier:  in.Identifier,
		Limit:       in.Limit,
		Duration:    time.Duration(in.Duration) * time.Millisecond,
	})
	if err != nil {
		return storeError(err, namespaceNotFound(in.Namespace))
	}
	return c.setData(map[string]string{"overrideId": o.ID})
}

// namespace resolves an existing namespace of the caller's workspace.
func (s *Server) namespace(c *call, idOrName string) (store.Namespace, *apiError) {
	ns, err := s.cfg.Catalog.Namespace(c.ctx, c.workspace, idOrName)
	if err != nil {
		return ns, storeError(err, namespaceNotFound(idOrName))
	}
	return ns, nil
}

func (s *Server) getOverride(c *call) *apiError {
	in, es := decodeOverrideRef(c.body)
	if len(es) > 0 {
		return badRequest(es)
	}
	ns, e := s.namespace(c, in.Namespace)
	if e != nil {
		return e
	}
	o, err := s.cfg.Catalog.Store().Override(c.ctx, c.workspace, ns.ID, in.Identifier)
	if err != nil {
		return storeError(err, overrideNotFound(in.Identifier))
	}
	return c.setData(toOverrideData(o))
}

func (s *Server) listOverrides(c *call) *apiError {
	in, es := decodeList(c.body)
	if len(es) > 0 {
		return badRequest(es)
	}
	ns, e := s.namespace(c, in.Namespace)
	if e != nil {
		return e
	}
	os, err := s.cfg.Catalog.Store().ListOverrides(c.ctx, c.workspace, ns.ID, in.After, in.Limit+1)
	if err != nil {
		return storeError(err, namespaceNotFound(in.Namespace))
	}
	page := &pagination{HasMore: len(os) > in.Limit}
	if page.HasMore {
		os = os[:in.Limit]
		page.Cursor = encodeCursor(os[len(os)-1].Identifier)
	}
	data := make([]overrideData, len(os))
	for i, o := range os {
		data[i] = toOverrideData(o)
	}
	c.page = page
	return c.setData(data)
}

func (s *Server) deleteOverride(c *call) *apiError {
	in, es := decodeOverrideRef(c.body)
	if len(es) > 0 {
		return badRequest(es)
	}
	ns, e := s.namespace(c, in.Namespace)
	if e != nil {
		return e
	}
	if err := s.cfg.Catalog.DeleteOverride(c.ctx, c.workspace, ns.ID, in.Identifier); err != nil {
		return storeError(err, overrideNotFound(in.Identifier))
	}
	c.data = append(c.data, "{}"...)
	return nil
}
