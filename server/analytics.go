package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/analytics"
)

// Analytics records every decision and answers getAnalytics;
// *analytics.Recorder implements it. Record is on the path of every limit
// call and must return at once: *analytics.Recorder never waits, and
// drops (and counts) a decision rather than wait. The API's identifiers
// (at most MaxNameBytes) fit analytics.MaxIdentifierBytes, so the
// analytics keep them whole.
type Analytics interface {
	// Record records one decision on identifier in workspace's namespace,
	// made at now.
	Record(workspace, namespace, identifier string, passed bool, now time.Time)
	// Report returns the analytics of workspace's namespace over iv ending
	// at now.
	Report(workspace, namespace string, iv analytics.Interval, now time.Time) (analytics.Report, error)
	// Namespaces returns the namespaces with analytics, sorted by
	// workspace then name, for the console.
	Namespaces() []analytics.Key
	// Totals returns the passed and denied decisions of each of keys over
	// the last hour ending at now (analytics.TotalsSpan), in the order of
	// keys, for the console's first page. The server bounds keys.
	Totals(keys []analytics.Key, now time.Time) []analytics.Counts
}

var _ Analytics = (*analytics.Recorder)(nil)

// The analytics keep every identifier the API takes whole: this does not
// compile if MaxNameBytes passes analytics.MaxIdentifierBytes.
var _ [analytics.MaxIdentifierBytes - MaxNameBytes]struct{}

// TypeAnalyticsOff is the problem type of a getAnalytics call to a server
// whose analytics are turned off (--analytics=false).
const TypeAnalyticsOff = "urn:sluice:error:analytics_off"

// analyticsInput is a decoded getAnalytics body.
type analyticsInput struct {
	Namespace string
	Interval  analytics.Interval
}

// Members of a getAnalytics body, by index in analyticsNames.
const (
	analyticsNamespace = iota
	analyticsInterval
)

var analyticsNames = []string{"namespace", "interval"}

// decodeAnalytics decodes a getAnalytics body: a namespace and an interval,
// "1m", "1h" or "24h".
func decodeAnalytics(data []byte) (analyticsInput, errs) {
	var in analyticsInput
	d := newDecoder(data)
	o := object{loc: "body", index: -1, names: analyticsNames, required: 0b11}
	d.members(&o, func(i int) {
		switch i {
		case analyticsNamespace:
			d.name(&o, i, &in.Namespace)
		case analyticsInterval:
			s, ok := d.stringValue(&o, i)
			if !ok {
				return
			}
			switch iv := analytics.Interval(s); iv {
			case analytics.Minute, analytics.Hour, analytics.Day:
				in.Interval = iv
			default:
				d.errs.add(o.field(i), "must be \"1h\" or \"24h\" (or \"1m\"), not "+quote(s), "Send \"interval\":\"1h\" for the last hour per second, \"24h\" for the last day per minute.")
			}
		}
	})
	d.finish()
	return in, d.result()
}

// getAnalytics answers the passed and denied series and the top
// identifiers of one of the caller's namespaces.
func (s *Server) getAnalytics(c *call) *apiError {
	in, es := decodeAnalytics(c.body)
	if len(es) > 0 {
		return badRequest(es)
	}
	if s.cfg.Analytics == nil {
		return newError(http.StatusNotFound, TypeAnalyticsOff, "Analytics are turned off on this server (--analytics=false).")
	}
	ns, e := s.namespace(c, in.Namespace)
	if e != nil {
		return e
	}
	rep, err := s.cfg.Analytics.Report(c.workspace, ns.Name, in.Interval, c.start)
	if err != nil {
		return internalError(err)
	}
	c.data = appendReport(c.data, in.Interval, rep)
	return nil
}

// appendReport appends the JSON of a getAnalytics answer's data: series
// (time in Unix ms), top lists, and what they cover.
func appendReport(b []byte, iv analytics.Interval, rep analytics.Report) []byte {
	b = append(b, `{"interval":`...)
	b = appendString(b, string(iv))
	b = append(b, `,"step":`...)
	b = strconv.AppendInt(b, rep.Step.Milliseconds(), 10)
	b = append(b, `,"tracked":`...)
	b = appendBool(b, rep.Tracked)
	b = append(b, `,"series":[`...)
	for i, p := range rep.Series {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"time":`...)
		b = strconv.AppendInt(b, p.Time.UnixMilli(), 10)
		b = append(b, `,"passed":`...)
		b = strconv.AppendUint(b, p.Passed, 10)
		b = append(b, `,"denied":`...)
		b = strconv.AppendUint(b, p.Denied, 10)
		b = append(b, '}')
	}
	b = append(b, `],"top":{"denied":`...)
	b = appendHeavy(b, rep.TopDenied)
	b = append(b, `,"requests":`...)
	b = appendHeavy(b, rep.TopRequests)
	b = append(b, `},"totals":{"denied":`...)
	b = strconv.AppendUint(b, rep.Denials, 10)
	b = append(b, `,"requests":`...)
	b = strconv.AppendUint(b, rep.Requests, 10)
	return append(b, "}}"...)
}

// appendHeavy appends a top list.
func appendHeavy(b []byte, hs []analytics.Heavy) []byte {
	b = append(b, '[')
	for i, h := range hs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"identifier":`...)
		b = appendString(b, h.Identifier)
		b = append(b, `,"count":`...)
		b = strconv.AppendUint(b, h.Count, 10)
		b = append(b, `,"error":`...)
		b = strconv.AppendUint(b, h.Error, 10)
		b = append(b, '}')
	}
	return append(b, ']')
}
