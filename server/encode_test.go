package server

import (
	"bytes"
	"encoding/json"
	"testing"
)

// marshal is what encoding/json writes for v without HTML escaping: the
// reference of the hand-written encoders.
func marshal(t testing.TB, v any) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// The shapes of the response bodies, as encoding/json would write them.
type (
	metaRef struct {
		RequestID string `json:"requestId"`
	}
	okRef struct {
		Meta       metaRef     `json:"meta"`
		Data       any         `json:"data"`
		Pagination *pagination `json:"pagination,omitempty"`
	}
	errorRef struct {
		Meta  metaRef   `json:"meta"`
		Error *apiError `json:"error"`
	}
)

func TestEncodeMatchesEncodingJSON(t *testing.T) {
	const id = "req_0a1b2c\"3"
	limit := limitData{Limit: 10, Remaining: -3, Reset: 1_700_000_000_123, Success: false, OverrideID: "rlor_<&>"}
	multi := multiData{Passed: true, Limits: []checkData{
		{Namespace: "a\u2028b", Identifier: "é\x01\x7f", Limit: 1, Remaining: 0, Reset: 5, Passed: true},
		{Namespace: "n", Identifier: "i\xff", Limit: 9007199254740991, Passed: false, OverrideID: "x"},
	}}
	e := badRequest([]FieldError{{Location: "body.limit", Message: "must be \"an\" integer", Fix: "Use\ta number."}, {Location: "body", Message: "m"}})
	for _, tc := range []struct {
		name string
		got  []byte
		want any
	}{
		{"limit", appendOK(nil, id, limit.appendJSON(nil), nil), okRef{Meta: metaRef{id}, Data: limit}},
		{"limit without override", appendOK(nil, id, (&limitData{Success: true}).appendJSON(nil), nil), okRef{Meta: metaRef{id}, Data: limitData{Success: true}}},
		{"multiLimit", appendOK(nil, id, multi.appendJSON(nil), nil), okRef{Meta: metaRef{id}, Data: multi}},
		{"page with cursor", appendOK(nil, id, []byte(`[]`), &pagination{Cursor: "YQ", HasMore: true}), okRef{Meta: metaRef{id}, Data: []int{}, Pagination: &pagination{Cursor: "YQ", HasMore: true}}},
		{"last page", appendOK(nil, id, []byte(`[]`), &pagination{}), okRef{Meta: metaRef{id}, Data: []int{}, Pagination: &pagination{}}},
		{"error with errors", appendError(nil, id, e), errorRef{Meta: metaRef{id}, Error: e}},
		{"error without errors", appendError(nil, id, internalError(nil)), errorRef{Meta: metaRef{id}, Error: internalError(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if want := marshal(t, tc.want); string(tc.got) != want {
				t.Fatalf("got  %s\nwant %s", tc.got, want)
			}
		})
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\/\b\f\n\r\t\x00\x1f\x7f", "<&>", "\u2028\u2029", "é😀", "\xff\xc3(", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := marshal(t, s)
		if got := string(appendString(nil, s)) + "\n"; got != want {
			t.Fatalf("appendString(%q) = %s, encoding/json writes %s", s, got, want)
		}
	})
}
