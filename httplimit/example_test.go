package httplimit_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/httplimit"
)

// sluiceURL and sluiceRootKey are the address and a root key of your Sluice
// server, e.g. "https://sluice.internal:7070". (Here the tests start one.)
var sluiceURL, sluiceRootKey string

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, "hello\n")
})

// Limit each client IP to 2 requests a minute, deciding in this process.
func Example() {
	limiter, err := sluice.New(sluice.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	mw, err := httplimit.New(httplimit.Config{
		Limiter: httplimit.Embedded(limiter),
		Policy:  httplimit.Policy{Limit: 2, Window: time.Minute},
	})
	if err != nil {
		log.Fatal(err)
	}
	handler := mw.Wrap(hello)

	for range 3 {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil)) // from 192.0.2.1
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("Retry-After") != "")
	}
	// Output:
	// 200 "default";q=2;w=60 false
	// 200 "default";q=2;w=60 false
	// 429 "default";q=2;w=60 true
}

// Ask a Sluice server instead: every replica of the service then shares the
// counts, and the server's overrides apply.
func ExampleRemote() {
	c, err := client.New(sluiceURL, sluiceRootKey)
	if err != nil {
		log.Fatal(err)
	}
	defer c.CloseIdleConnections()
	mw, err := httplimit.New(httplimit.Config{
		Limiter: httplimit.Remote(c),
		Policy:  httplimit.Policy{Name: "example.remote", Limit: 100, Window: time.Minute},
		Key:     httplimit.Header("X-API-Key"),
		OnError: func(r *http.Request, err error) { log.Printf("rate limit: %v", err) }, // it fails open
	})
	if err != nil {
		log.Fatal(err)
	}
	handler := mw.Wrap(hello)

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-API-Key", "key-42")
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	// Output: 200 "example.remote";q=100;w=60
}

// A policy per route: logins are limited harder, health checks not at all.
func ExampleConfig_policyFunc() {
	limiter, err := sluice.New(sluice.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	mw, err := httplimit.New(httplimit.Config{
		Limiter: httplimit.Embedded(limiter),
		PolicyFunc: func(r *http.Request) (httplimit.Policy, bool) {
			switch r.URL.Path {
			case "/healthz":
				return httplimit.Policy{}, false
			case "/login":
				return httplimit.Policy{Name: "login", Limit: 5, Window: time.Minute}, true
			}
			return httplimit.Policy{Name: "api", Limit: 1000, Window: time.Minute}, true
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	handler := mw.Wrap(hello)

	for _, path := range []string{"/login", "/orders", "/healthz"} {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Printf("%s %d %q\n", path, w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// /login 200 "\"login\";q=5;w=60"
	// /orders 200 "\"api\";q=1000;w=60"
	// /healthz 200 ""
}

// Behind a load balancer, key by the address it appends to X-Forwarded-For;
// what the client wrote there itself is skipped.
func ExampleTrustedProxies() {
	proxies := httplimit.TrustedProxies{
		Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Header:   httplimit.XForwardedFor,
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.1.2.3:41000"                           // the load balancer
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.17") // spoofed, then appended by it
	ip, err := proxies.ClientIP(r)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ip)
	// The key function for httplimit.Config.Key:
	_ = httplimit.ClientIP(proxies)
	// Output: 198.51.100.17
}

// A token budget for a language model behind the middleware: each team
// may spend 1,000 tokens an hour. A request passes while anything is left
// (Cost 0: a peek), and the handler adds the tokens its answer used once
// it knows them; the middleware reports them after the handler returns,
// even past the budget, so the team's next request is refused.
func ExampleAddUsage() {
	limiter, err := sluice.New(sluice.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	mw, err := httplimit.New(httplimit.Config{
		Limiter: httplimit.Embedded(limiter),
		Policy:  httplimit.Policy{Name: "tokens", Limit: 1000, Window: time.Hour},
		Key:     httplimit.Header("X-Team"),
		Cost:    func(*http.Request) int64 { return 0 },
	})
	if err != nil {
		log.Fatal(err)
	}
	answer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used := int64(600) // what the model's answer cost, known once it is written
		_, _ = io.WriteString(w, "an answer\n")
		httplimit.AddUsage(r.Context(), used)
	})
	handler := mw.Wrap(answer)

	for range 3 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/chat", nil)
		r.Header.Set("X-Team", "team-7")
		handler.ServeHTTP(w, r)
		remaining, _, _ := strings.Cut(w.Header().Get("RateLimit"), ";t=") // t: seconds to the window's end
		fmt.Println(w.Code, remaining)
	}
	// Output:
	// 200 "tokens";r=1000
	// 200 "tokens";r=400
	// 429 "tokens";r=0
}
