// Command ceiling is the throughput ceiling of Sluice's HTTP API: a trivial
// Go JSON handler that does what any handler of /v2/ratelimit.limit must do
// (net/http, read the body, decode it with encoding/json, encode a response
// of the same shape) and no rate limiting. tools/wrk/ceiling.sh runs wrk
// against it and against `sluice serve` in turn; the server's figures are
// judged against this one's.
//
//	go run . -addr 127.0.0.1:7071
//
// POST /v1/traces answers an empty OTLP/HTTP success, so that a second
// instance can receive the spans of a traced server under test. It lives in
// its own module and uses only the standard library.
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// limitRequest is the body of /v2/ratelimit.limit.
type limitRequest struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Duration   int64  `json:"duration"`
	Cost       *int64 `json:"cost,omitempty"`
}

// limitResponse has the shape of Sluice's (and Unkey's) answer.
type limitResponse struct {
	Meta struct {
		RequestID string `json:"requestId"`
	} `json:"meta"`
	Data struct {
		Limit     int64 `json:"limit"`
		Remaining int64 `json:"remaining"`
		Reset     int64 `json:"reset"`
		Success   bool  `json:"success"`
	} `json:"data"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:7071", "listen address")
	flag.Parse()
	var ids atomic.Uint64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/ratelimit.limit", func(w http.ResponseWriter, r *http.Request) {
		var in limitRequest
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var out limitResponse
		out.Meta.RequestID = "req_" + strconv.FormatUint(ids.Add(1), 36)
		out.Data.Limit, out.Data.Remaining, out.Data.Success = in.Limit, in.Limit-1, true
		out.Data.Reset = time.Now().Add(time.Duration(in.Duration) * time.Millisecond).UnixMilli()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	})
	log.Printf("ceiling: listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, mux))
}
