package main

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/servetest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// sluiceBinary builds cmd/sluice once for the tests that run it.
var sluiceBinary = sync.OnceValues(func() (string, error) {
	dir, bin, err := servetest.Build()
	if err == nil {
		binDirs = append(binDirs, dir)
	}
	return bin, err
})

// binDirs are the folders of built binaries, removed by TestMain.
var binDirs []string

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range binDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// startSluice runs the built binary with args (servetest.Start).
func startSluice(t *testing.T, args ...string) *servetest.Server {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the sluice binary")
	}
	bin, err := sluiceBinary()
	if err != nil {
		t.Fatal(err)
	}
	return servetest.Start(t, bin, args...)
}

// postJSON posts body to url with the root key "dev" and returns the
// status and body.
func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer dev")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return res.StatusCode, b.String()
}

// TestAnalyticsFlag runs sluice with analytics on (the default) and off:
// on, getAnalytics counts the decisions made; off, it answers 404 with the
// reason and decisions go on.
func TestAnalyticsFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"default", nil, 200, `"top":{"denied":[{"identifier":"user-1","count":2,"error":0}]`},
		{"off", []string{"--analytics=false"}, 404, "analytics_off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startSluice(t, tc.args...)
			for range 3 {
				if code, body := postJSON(t, s.URL+"/v2/ratelimit.limit", `{"namespace":"api","identifier":"user-1","limit":1,"duration":60000}`); code != 200 {
					t.Fatalf("limit: %d %s", code, body)
				}
			}
			code, body := postJSON(t, s.URL+"/v2/ratelimit.getAnalytics", `{"namespace":"api","interval":"1h"}`)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Fatalf("getAnalytics: %d %s; want %d with %s", code, body, tc.code, tc.want)
			}
		})
	}
}

// TestAnalyticsRegion runs two servers sharing a Redis: each answers
// getAnalytics for both, once the other has published (every second).
func TestAnalyticsRegion(t *testing.T) {
	redisURL := "redis://" + testenv.RedisAddr(t)
	a := startSluice(t, "--redis-url", redisURL)
	b := startSluice(t, "--redis-url", redisURL)
	var nb [6]byte
	_, _ = rand.Read(nb[:])
	ns := "region-" + hex.EncodeToString(nb[:])
	limit := func(s *servetest.Server, id string, n int) {
		for range n {
			if code, body := postJSON(t, s.URL+"/v2/ratelimit.limit", `{"namespace":"`+ns+`","identifier":"`+id+`","limit":100,"duration":60000}`); code != 200 {
				t.Fatalf("limit: %d %s", code, body)
			}
		}
	}
	limit(a, "on-a", 3)
	limit(b, "on-b", 5)
	for _, s := range []*servetest.Server{a, b} {
		waitFor(t, "both nodes' decisions in one answer", func() bool {
			code, body := postJSON(t, s.URL+"/v2/ratelimit.getAnalytics", `{"namespace":"`+ns+`","interval":"1m"}`)
			return code == 200 && strings.Contains(body, `{"identifier":"on-b","count":5,"error":0}`) &&
				strings.Contains(body, `{"identifier":"on-a","count":3,"error":0}`) && strings.Contains(body, `"totals":{"denied":0,"requests":8}`)
		})
	}
}
