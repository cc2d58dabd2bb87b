package server

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
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
// listener (cmd/sluice serves it on the admin listener): a page with every
// namespace's passed and denied decisions, its top identifiers and its
// overrides, which it creates, edits and deletes.
//
// The page calls JSON endpoints under /api/: GET /api/namespaces (the
// namespaces with analytics) and POST
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

// consoleNamespace is one entry of GET /api/namespaces.
type consoleNamespace struct {
	Workspace string `json:"workspace"`
	Namespace string `json:"namespace"`
}

// consoleNamespaces answers the namespaces with analytics.
func (s *Server) consoleNamespaces(x *exchange, _ *http.Request) {
	list := []consoleNamespace{}
	if s.cfg.Analytics != nil {
		for _, k := range s.cfg.Analytics.Namespaces() {
			list = append(list, consoleNamespace{Workspace: k.Workspace, Namespace: k.Namespace})
		}
	}
	data, err := json.Marshal(list)
	if err != nil { // cannot happen with these types
		s.writeError(x, internalError(err))
		return
	}
	x.out = appendOK(x.out[:0], x.id, data, nil)
	send(x, http.StatusOK, x.out)
}
