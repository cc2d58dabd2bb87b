package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBodyTooLarge sends 5 MB to a real listener, with and without a
// Content-Length: the client can send the whole body and then reads the 413,
// instead of a connection reset.
func TestBodyTooLarge(t *testing.T) {
	srv := httptest.NewServer(newTestServer(t).Handler())
	defer srv.Close()
	body := `{"namespace":"` + strings.Repeat("a", 5<<20) + `"}`
	for _, tc := range []struct {
		name    string
		chunked bool
	}{{"content length", false}, {"chunked", true}} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			sent := make(chan error, 1)
			go func() {
				head := "POST /v2/ratelimit.limit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\n"
				payload := body
				if tc.chunked {
					head += "Transfer-Encoding: chunked\r\n\r\n"
					payload = strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
				} else {
					head += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
				}
				_, err := io.WriteString(conn, head+payload)
				sent <- err
			}()
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the response: %v", err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(raw), TypeBodyTooLarge) {
				t.Fatalf("status %d, want 413: %s", resp.StatusCode, raw)
			}
			if err := <-sent; err != nil {
				t.Fatalf("sending the body failed: %v", err)
			}
			if !resp.Close {
				t.Error("the connection is not closed after a 413")
			}
		})
	}
}
