package main

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// rateLimitResp encodes a RateLimitResp with status (0 UNDER_LIMIT, 1
// OVER_LIMIT), a limit and, if not empty, an error.
func rateLimitResp(status uint64, errMsg string) []byte {
	var r []byte
	r = protowire.AppendTag(r, 1, protowire.VarintType)
	r = protowire.AppendVarint(r, status)
	r = protowire.AppendTag(r, 2, protowire.VarintType)
	r = protowire.AppendVarint(r, 10)
	if errMsg != "" {
		r = protowire.AppendTag(r, 5, protowire.BytesType)
		r = protowire.AppendString(r, errMsg)
	}
	return r
}

// getRateLimitsResp encodes a GetRateLimitsResp of responses.
func getRateLimitsResp(responses ...[]byte) []byte {
	var b []byte
	for _, r := range responses {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, r)
	}
	return b
}

// TestUnderLimit decodes gubernator's answers by hand, as the load
// generator does.
func TestUnderLimit(t *testing.T) {
	under, over := rateLimitResp(0, ""), rateLimitResp(1, "")
	for _, tc := range []struct {
		name    string
		resp    []byte
		want    int
		passed  bool
		wantErr bool
	}{
		{"one under", getRateLimitsResp(under), 1, true, false},
		{"three under", getRateLimitsResp(under, under, under), 3, true, false},
		{"one of three over", getRateLimitsResp(under, over, under), 3, false, false},
		{"an error", getRateLimitsResp(under, rateLimitResp(0, "pool is empty")), 2, false, true},
		{"too few answers", getRateLimitsResp(under), 3, false, true},
		{"truncated", getRateLimitsResp(under)[:3], 1, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			passed, err := underLimit(tc.resp, tc.want)
			if (err != nil) != tc.wantErr || passed != tc.passed {
				t.Fatalf("underLimit = %v, %v; want passed %v, error %v", passed, err, tc.passed, tc.wantErr)
			}
		})
	}
}
