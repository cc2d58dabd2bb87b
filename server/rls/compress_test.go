package rls

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHandlerNeverCompressesSmallAnswers calls the connect handler (the
// API port's RLS) with the Connect protocol and a client that accepts
// gzip: its answer, a few dozen bytes, comes back uncompressed.
func TestHandlerNeverCompressesSmallAnswers(t *testing.T) {
	h := newHarness(t, mustParse(t, testRules))
	path, handler := h.svc.Handler()
	mux := http.NewServeMux()
	mux.Handle(path, handler)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	body := `{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"gzip"}]}]}`
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept-Encoding", "gzip")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, raw)
	}
	if enc := res.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		t.Errorf("a %d-byte answer came back %s-compressed", len(raw), enc)
	}
}
