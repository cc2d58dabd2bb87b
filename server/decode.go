package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of the HTTP API's request bodies.
const (
	// MaxSafeInteger is 2^53-1, the largest integer every JSON client
	// represents exactly; larger numbers are rejected.
	MaxSafeInteger = 1<<53 - 1
	// MinDurationMS and MaxDurationMS bound a window length, in ms
	// (1 second to 30 days).
	MinDurationMS = 1000
	MaxDurationMS = 2_592_000_000
	// MaxNameBytes bounds namespaces and identifiers, in bytes of UTF-8.
	MaxNameBytes = 512
	// MaxChecks bounds the checks of one multiLimit call.
	MaxChecks = 100
	// DefaultListLimit and MaxListLimit bound a listOverrides page.
	DefaultListLimit = 10
	MaxListLimit     = 100
)

// limitInput is a decoded V2RatelimitLimitRequestBody.
type limitInput struct {
	Namespace  string
	Identifier string
	Limit      int64
	Duration   int64 // ms
	Cost       int64
}

// overrideInput is a decoded V2RatelimitSetOverrideRequestBody.
type overrideInput struct {
	Namespace  string
	Identifier string
	Limit      int64
	Duration   int64 // ms
}

// overrideRef is a decoded get/deleteOverride request body.
type overrideRef struct {
	Namespace  string
	Identifier string
}

// listInput is a decoded V2RatelimitListOverridesRequestBody.
type listInput struct {
	Namespace string
	After     string // the cursor, decoded
	Limit     int
}

// field describes one member of a JSON object: its name, whether it must be
// present, and how to decode its raw value (loc is its JSON path).
type field struct {
	name     string
	required bool
	decode   func(raw json.RawMessage, loc string) *FieldError
}

// errs collects field errors.
type errs []FieldError

func (e *errs) add(loc, msg, fix string) {
	*e = append(*e, FieldError{Location: loc, Message: msg, Fix: fix})
}

// parseObject decodes data, which must be exactly one JSON object and
// nothing else, member by member: names are matched exactly (case
// included), unknown and duplicate members are errors, and so is any data
// after the object.
func parseObject(data []byte, loc string, fields []field) errs {
	var out errs
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		out.add(loc, "is not valid JSON: "+jsonErr(err), "Send a JSON object.")
		return out
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		out.add(loc, "must be a JSON object", "Send a JSON object.")
		return out
	}
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			out.add(loc, "is not valid JSON: "+jsonErr(err), "")
			return out
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			out.add(loc, "is not valid JSON: "+jsonErr(err), "")
			return out
		}
		f := lookupField(fields, name)
		switch {
		case f == nil:
			out.add(loc+"."+name, "is not a known field", "Remove it; allowed fields: "+fieldNames(fields)+".")
		case seen[name]:
			out.add(loc+"."+name, "appears more than once", "Send each field once.")
		default:
			seen[name] = true
			if fe := f.decode(raw, loc+"."+name); fe != nil {
				out = append(out, *fe)
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		out.add(loc, "is not valid JSON: "+jsonErr(err), "")
		return out
	}
	if err := atEOF(dec); err != nil {
		out.add(loc, err.Error(), "Send exactly one JSON value.")
		return out
	}
	for _, f := range fields {
		if f.required && !seen[f.name] {
			out.add(loc+"."+f.name, "is required", "")
		}
	}
	return out
}

// atEOF reports data left after the decoder's value.
func atEOF(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("has data after the JSON value")
	}
	return nil
}

func jsonErr(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return err.Error()
}

func lookupField(fields []field, name string) *field {
	for i := range fields {
		if fields[i].name == name {
			return &fields[i]
		}
	}
	return nil
}

func fieldNames(fields []field) string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

// name decodes a namespace or identifier: a JSON string of 1..MaxNameBytes
// bytes of valid, printable UTF-8.
func name(dst *string) func(json.RawMessage, string) *FieldError {
	return func(raw json.RawMessage, loc string) *FieldError {
		s, fe := jsonString(raw, loc)
		if fe != nil {
			return fe
		}
		if fe := checkName(s, loc); fe != nil {
			return fe
		}
		*dst = s
		return nil
	}
}

// jsonString decodes a JSON string whose raw bytes are valid UTF-8 and
// contain no lone surrogate escape (encoding/json would silently replace
// both with U+FFFD).
func jsonString(raw json.RawMessage, loc string) (string, *FieldError) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", &FieldError{Location: loc, Message: "must be a string"}
	}
	if !utf8.Valid(raw) {
		return "", &FieldError{Location: loc, Message: "is not valid UTF-8"}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", &FieldError{Location: loc, Message: "must be a string"}
	}
	if strings.ContainsRune(s, utf8.RuneError) && bytes.Count(raw, []byte("\uFFFD"))+countFold(raw, `\ufffd`) < strings.Count(s, "\uFFFD") {
		return "", &FieldError{Location: loc, Message: "contains an unpaired UTF-16 surrogate escape"}
	}
	return s, nil
}

// countFold counts the case-insensitive occurrences of an ASCII needle.
func countFold(b []byte, needle string) int {
	return bytes.Count(bytes.ToLower(b), []byte(needle))
}

func checkName(s, loc string) *FieldError {
	switch {
	case len(s) == 0:
		return &FieldError{Location: loc, Message: "must not be empty"}
	case len(s) > MaxNameBytes:
		return &FieldError{Location: loc, Message: fmt.Sprintf("is %d bytes long; the maximum is %d", len(s), MaxNameBytes)}
	}
	for i, r := range s {
		if !unicode.IsPrint(r) {
			return &FieldError{Location: loc, Message: fmt.Sprintf("contains the non-printable character %U at byte %d", r, i), Fix: "Use printable UTF-8 only (no control characters)."}
		}
	}
	return nil
}

// integer decodes a JSON integer in [lo, hi] (hi <= MaxSafeInteger).
func integer(dst *int64, lo, hi int64) func(json.RawMessage, string) *FieldError {
	return func(raw json.RawMessage, loc string) *FieldError {
		s := string(raw)
		if len(s) == 0 || s[0] != '-' && (s[0] < '0' || s[0] > '9') {
			return &FieldError{Location: loc, Message: "must be an integer"}
		}
		if strings.ContainsAny(s, ".eE") {
			return &FieldError{Location: loc, Message: "must be an integer, without fraction or exponent"}
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v > MaxSafeInteger || v < -MaxSafeInteger {
			return &FieldError{Location: loc, Message: "is outside the safe integer range (|n| <= 2^53-1)", Fix: fmt.Sprintf("Use a value between %d and %d.", lo, hi)}
		}
		if v < lo || v > hi {
			return &FieldError{Location: loc, Message: fmt.Sprintf("is %d; it must be between %d and %d", v, lo, hi)}
		}
		*dst = v
		return nil
	}
}

func limitFields(in *limitInput) []field {
	return []field{
		{"namespace", true, name(&in.Namespace)},
		{"identifier", true, name(&in.Identifier)},
		{"limit", true, integer(&in.Limit, 0, MaxSafeInteger)},
		{"duration", true, integer(&in.Duration, MinDurationMS, MaxDurationMS)},
		{"cost", false, integer(&in.Cost, 0, MaxSafeInteger)},
	}
}

// decodeLimit decodes a ratelimit.limit body. Cost defaults to 1.
func decodeLimit(data []byte) (limitInput, errs) {
	in := limitInput{Cost: 1}
	return in, parseObject(data, "body", limitFields(&in))
}

// decodeMultiLimit decodes a ratelimit.multiLimit body: a JSON array of
// 1..MaxChecks limit bodies.
func decodeMultiLimit(data []byte) ([]limitInput, errs) {
	var out errs
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		out.add("body", "is not valid JSON: "+jsonErr(err), "Send a JSON array of limit requests.")
		return nil, out
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		out.add("body", "must be a JSON array of limit requests", "Send a JSON array of 1 to 100 limit requests.")
		return nil, out
	}
	var ins []limitInput
	n := 0
	for i := 0; dec.More(); i++ {
		n++
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			out.add("body", "is not valid JSON: "+jsonErr(err), "")
			return nil, out
		}
		if i >= MaxChecks {
			continue // counted below, not decoded
		}
		in, es := decodeLimitAt(raw, fmt.Sprintf("body[%d]", i))
		out = append(out, es...)
		ins = append(ins, in)
	}
	if _, err := dec.Token(); err != nil {
		out.add("body", "is not valid JSON: "+jsonErr(err), "")
		return nil, out
	}
	if err := atEOF(dec); err != nil {
		out.add("body", err.Error(), "Send exactly one JSON value.")
		return nil, out
	}
	if n == 0 || n > MaxChecks {
		out.add("body", fmt.Sprintf("must hold between 1 and %d limit requests", MaxChecks), "Split the checks over several calls.")
	}
	return ins, out
}

func decodeLimitAt(raw json.RawMessage, loc string) (limitInput, errs) {
	in := limitInput{Cost: 1}
	return in, parseObject(raw, loc, limitFields(&in))
}

// decodeSetOverride decodes a ratelimit.setOverride body. The identifier may
// contain '*' wildcards.
func decodeSetOverride(data []byte) (overrideInput, errs) {
	var in overrideInput
	return in, parseObject(data, "body", []field{
		{"namespace", true, name(&in.Namespace)},
		{"identifier", true, name(&in.Identifier)},
		{"limit", true, integer(&in.Limit, 0, MaxSafeInteger)},
		{"duration", true, integer(&in.Duration, MinDurationMS, MaxDurationMS)},
	})
}

// decodeOverrideRef decodes a getOverride or deleteOverride body.
func decodeOverrideRef(data []byte) (overrideRef, errs) {
	var in overrideRef
	return in, parseObject(data, "body", []field{
		{"namespace", true, name(&in.Namespace)},
		{"identifier", true, name(&in.Identifier)},
	})
}

// decodeList decodes a listOverrides body.
func decodeList(data []byte) (listInput, errs) {
	in := listInput{Limit: DefaultListLimit}
	var limit int64 = DefaultListLimit
	es := parseObject(data, "body", []field{
		{"namespace", true, name(&in.Namespace)},
		{"cursor", false, func(raw json.RawMessage, loc string) *FieldError {
			s, fe := jsonString(raw, loc)
			if fe != nil {
				return fe
			}
			after, ok := decodeCursor(s)
			if !ok {
				return &FieldError{Location: loc, Message: "is not a cursor returned by listOverrides", Fix: "Pass pagination.cursor from the previous page unchanged, or omit it."}
			}
			in.After = after
			return nil
		}},
		{"limit", false, integer(&limit, 1, MaxListLimit)},
	})
	in.Limit = int(limit)
	return in, es
}

// encodeCursor and decodeCursor turn the last identifier of a page into an
// opaque cursor and back.
func encodeCursor(identifier string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(identifier))
}

func decodeCursor(c string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) == 0 || len(b) > MaxNameBytes || !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}
