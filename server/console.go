package server

import (
	"embed"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/analytics"
)

// consoleFiles are the console's page, script and style, served as they
// are: no build step, no network access.
//
//go:embed console
var consoleFiles embed.FS

// consoleAPIs are the API endpoints the console calls, by name.
func (s *Server) consoleAPIs() map[string]apiHandler {
	return map[string]apiHandler{
		"getAnalytics":   s.getAnalytics,
		"setOverride":    s.setOverride,
		"getOverride":    s.getOverride,
		"listOverrides":  s.listOverrides,
		"deleteOverride": s.deleteOverride,
	}
}

// ConsoleHandler returns the web console, to serve at / on a private
// listener (cmd/sluice serves it on the admin listener): a first page with
// every namespace and its passed and denied decisions of the last hour,
// and a view per namespace with its decisions over time, its top
// identifiers and its overrides, which it creates, edits and deletes. Each
// view has its own URL, in the fragment (#/ws/{workspace}/ns/{namespace}),
// which the page reads: the server serves the same page for every view.
//
// The page calls JSON endpoints under /api/: GET /api/namespaces (the
// first page: see consoleNamespaces) and POST
// /api/workspaces/{workspace}/v2/ratelimit.{getAnalytics, setOverride,
// getOverride, listOverrides, deleteOverride}, which take the API's bodies
// and answer its bodies through the same code: the same validation, store
// paths and errors. They need no root key, and act in any workspace: the
// listener must be private. A request whose Origin is not the console's
// own is refused, as is any body not sent as application/json, so that a
// web page elsewhere cannot drive them from an operator's browser.
func (s *Server) ConsoleHandler() http.Handler {
	mux := http.NewServeMux()
	for name, h := range s.consoleAPIs() {
		endpoint := "console." + name
		path := "/api/workspaces/{workspace}/v2/ratelimit." + name
		mux.Handle(path, s.wrap(endpoint, path, http.MethodPost, func(x *exchange, r *http.Request) {
			ws := r.PathValue("workspace")
			if e := checkConsoleCall(r, ws); e != nil {
				s.writeError(x, e)
				return
			}
			s.handle(x, r, endpoint, ws, h)
		}))
	}
	mux.Handle("/api/namespaces", s.wrap("console.namespaces", "/api/namespaces", http.MethodGet, s.consoleNamespaces))
	mux.Handle("/api/", s.wrap("console.not_found", "", "", func(x *exchange, r *http.Request) {
		s.writeError(x, newError(http.StatusNotFound, TypeRouteNotFound, "No console endpoint "+echo(r.Method)+" "+echo(r.URL.Path)+"."))
	}))
	mux.Handle("/", consoleStatic())
	return mux
}

// consoleStatic serves the console's files: 404 for any other path, 405
// for a method other than GET or HEAD.
func consoleStatic() http.Handler {
	static, _ := fs.Sub(consoleFiles, "console") // the folder is embedded: cannot fail
	files := http.FileServerFS(static)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		if name == "" {
			name = "index.html"
		}
		if _, err := fs.Stat(static, name); err != nil || name == "index.html" && r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		files.ServeHTTP(w, r)
	})
}

// checkConsoleCall refuses a console call from another origin, or for an
// empty or invalid workspace.
func checkConsoleCall(r *http.Request, ws string) *apiError {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return newError(http.StatusForbidden, TypeInvalidInput, "The console's endpoints answer the console's own page only (Origin "+quote(o)+").")
		}
	}
	if msg, _ := checkName(ws); msg != "" || strings.ContainsAny(ws, "/") {
		return badRequest([]FieldError{{Location: "path.workspace", Message: "is not a workspace name"}})
	}
	return nil
}

// Bounds of GET /api/namespaces, the console's first page: the
// namespaces listed, so the totals read (Analytics.Totals), and the bytes
// of the answer. The namespaces to choose from are bounded by the
// analytics (--analytics-max-namespaces on a node, and
// analytics/redis.MaxNamespaces more in a region).
const (
	// consoleListDefault is how many namespaces are listed without
	// ?limit=.
	consoleListDefault = 100
	// consoleListMax is the most ?limit= may ask for.
	consoleListMax = 1000
	// consoleListBytes bounds the list's JSON: the namespaces that would
	// pass it are left out and counted in "more", as those past the limit.
	consoleListBytes = 1 << 20
	// consoleEntryBytes is what an entry takes besides its two names: the
	// member names and punctuation, and two counts of up to 20 digits.
	consoleEntryBytes = len(`{"workspace":,"namespace":,"passed":,"denied":},`) + 2*20
)

// consoleQuery is a decoded query of GET /api/namespaces.
type consoleQuery struct {
	limit int    // the most namespaces listed
	match string // listed: the namespaces whose workspace or name contains it
}

// parseConsoleQuery decodes the query of GET /api/namespaces: limit (1 to
// consoleListMax) and match (a substring of the workspace or namespace,
// at most MaxNameBytes of UTF-8), each at most once, nothing else.
func parseConsoleQuery(raw string) (consoleQuery, *apiError) {
	q := consoleQuery{limit: consoleListDefault}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, badRequest([]FieldError{{Location: "query", Message: "is not a valid query string", Fix: "Escape each name and value (encodeURIComponent)."}})
	}
	var es []FieldError
	for name, vs := range vals {
		switch {
		case name != "limit" && name != "match":
			es = append(es, FieldError{Location: "query." + echo(name), Message: "is not a known parameter", Fix: "Remove it; allowed parameters: limit, match."})
		case len(vs) > 1:
			es = append(es, FieldError{Location: "query." + name, Message: "appears more than once", Fix: "Send each parameter once."})
		case name == "limit":
			n, err := strconv.Atoi(vs[0])
			if err != nil || n < 1 || n > consoleListMax {
				es = append(es, FieldError{Location: "query.limit", Message: "must be an integer from 1 to " + strconv.Itoa(consoleListMax) + ", not " + quote(vs[0])})
				continue
			}
			q.limit = n
		default:
			if len(vs[0]) > MaxNameBytes || !utf8.ValidString(vs[0]) {
				es = append(es, FieldError{Location: "query.match", Message: "must be UTF-8 of at most " + strconv.Itoa(MaxNameBytes) + " bytes"})
				continue
			}
			q.match = vs[0]
		}
	}
	if len(es) > 0 {
		slices.SortFunc(es, func(a, b FieldError) int { return strings.Compare(a.Location, b.Location) })
		return q, badRequest(es)
	}
	return q, nil
}

// consoleNamespaces answers the console's first page: the namespaces with
// analytics (those matching ?match=), sorted by workspace and name, each
// with its passed and denied decisions of the last hour; at most ?limit=
// of them and consoleListBytes of JSON, the rest counted in "more".
func (s *Server) consoleNamespaces(x *exchange, r *http.Request) {
	q, e := parseConsoleQuery(r.URL.RawQuery)
	if e != nil {
		s.writeError(x, e)
		return
	}
	var keys []analytics.Key
	if s.cfg.Analytics != nil {
		keys = s.cfg.Analytics.Namespaces()
	}
	matching := 0
	var page []analytics.Key
	size := 0
	var scratch []byte
	for _, k := range keys {
		if q.match != "" && !strings.Contains(k.Workspace, q.match) && !strings.Contains(k.Namespace, q.match) {
			continue
		}
		matching++
		if len(page) == q.limit || size > consoleListBytes {
			continue
		}
		scratch = appendString(appendString(scratch[:0], k.Workspace), k.Namespace)
		if size += len(scratch) + consoleEntryBytes; size <= consoleListBytes {
			page = append(page, k)
		}
	}
	var totals []analytics.Counts
	if len(page) > 0 {
		totals = s.cfg.Analytics.Totals(page, x.start)
	}
	first, _ := analytics.TotalsSpan(x.start)
	x.data = appendConsoleList(x.data[:0], page, totals, matching, s.cfg.Analytics != nil, first*60_000)
	x.out = appendOK(x.out[:0], x.id, x.data, nil)
	send(x, http.StatusOK, x.out)
}

// appendConsoleList appends the JSON of GET /api/namespaces's data: the
// namespaces listed with their totals, how many matched in all, how many
// are left out, whether analytics are on, and the start of the totals'
// hour in Unix ms.
func appendConsoleList(b []byte, page []analytics.Key, totals []analytics.Counts, matching int, on bool, since int64) []byte {
	b = append(b, `{"namespaces":[`...)
	for i, k := range page {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"workspace":`...)
		b = appendString(b, k.Workspace)
		b = append(b, `,"namespace":`...)
		b = appendString(b, k.Namespace)
		b = append(b, `,"passed":`...)
		b = strconv.AppendUint(b, totals[i].Passed, 10)
		b = append(b, `,"denied":`...)
		b = strconv.AppendUint(b, totals[i].Denied, 10)
		b = append(b, '}')
	}
	b = append(b, `],"total":`...)
	b = strconv.AppendInt(b, int64(matching), 10)
	b = append(b, `,"more":`...)
	b = strconv.AppendInt(b, int64(matching-len(page)), 10)
	b = append(b, `,"analytics":`...)
	b = appendBool(b, on)
	b = append(b, `,"since":`...)
	b = strconv.AppendInt(b, since, 10)
	return append(b, '}')
}
