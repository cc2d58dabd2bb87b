package server

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// The response bodies of the hot endpoints (limit, multiLimit, errors) are
// appended by hand to pooled buffers; the rest go through encoding/json.
// Either way the bytes are what encoding/json with SetEscapeHTML(false)
// writes for the same value (checked by the tests).

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string: '"', '\\' and control characters
// escaped, U+2028 and U+2029 escaped (for JavaScript), invalid UTF-8
// replaced by U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

// appendMeta appends `{"meta":{"requestId":"<id>"}`, the start of every
// response body.
func appendMeta(b []byte, id string) []byte {
	b = append(b, `{"meta":{"requestId":`...)
	b = appendString(b, id)
	return append(b, '}')
}

// appendOK appends a success body: meta, data (already JSON) and, for a
// list, the pagination.
func appendOK(b []byte, id string, data []byte, page *pagination) []byte {
	b = appendMeta(b, id)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	if page != nil {
		b = append(b, `,"pagination":{`...)
		if page.Cursor != "" {
			b = append(b, `"cursor":`...)
			b = appendString(b, page.Cursor)
			b = append(b, ',')
		}
		b = append(b, `"hasMore":`...)
		b = appendBool(b, page.HasMore)
		b = append(b, '}')
	}
	return append(b, "}\n"...)
}

// Bounds of the strings of an error body, in bytes of JSON, quotes and
// escapes included: with at most MaxFieldErrors entries they keep an error
// body within MaxErrorBodyBytes, which appendError enforces in any case.
const (
	maxDetailJSON = 1024
	maxFieldJSON  = 512
)

// errorTail ends an error body.
const errorTail = "}}\n"

// appendError appends the error body of e: at most MaxErrorBodyBytes, its
// detail and the strings of its errors cut (ending with "…") to their
// bounds, and its errors list cut where one more entry would pass the
// bound.
func appendError(b []byte, id string, e *apiError) []byte {
	start := len(b)
	b = appendMeta(b, id)
	b = append(b, `,"error":{"title":`...)
	b = appendString(b, e.Title)
	b = append(b, `,"detail":`...)
	b = appendStringMax(b, e.Detail, maxDetailJSON)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, `,"type":`...)
	b = appendString(b, e.Type)
	if len(e.Errors) > 0 {
		b = append(b, `,"errors":[`...)
		for i, fe := range e.Errors {
			mark := len(b)
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"location":`...)
			b = appendStringMax(b, fe.Location, maxFieldJSON)
			b = append(b, `,"message":`...)
			b = appendStringMax(b, fe.Message, maxFieldJSON)
			if fe.Fix != "" {
				b = append(b, `,"fix":`...)
				b = appendStringMax(b, fe.Fix, maxFieldJSON)
			}
			b = append(b, '}')
			if len(b)-start+len("]"+errorTail) > MaxErrorBodyBytes {
				b = b[:mark]
				break
			}
		}
		b = append(b, ']')
	}
	return append(b, errorTail...)
}

// appendStringMax appends s as appendString does if that takes at most limit
// bytes (limit >= 8); else the longest prefix of s whose JSON, followed by
// "…", fits in limit bytes.
func appendStringMax(b []byte, s string, limit int) []byte {
	start := len(b)
	b = appendString(b, s)
	if len(b)-start <= limit {
		return b
	}
	b = b[:start]
	budget := limit - len(`"…"`)
	n := 0 // the bytes of s kept
	for n < len(s) {
		r, size := utf8.DecodeRuneInString(s[n:])
		w := jsonLen(r, size)
		if w > budget {
			break
		}
		budget -= w
		n += size
	}
	b = appendString(b, s[:n]+"…")
	return b
}

// jsonLen is the length in appendString's output of the rune r, of size
// bytes in its input.
func jsonLen(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
		return len(`\ufffd`)
	case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20:
		return len(`\u0000`)
	}
	return size
}

// appendJSON appends the JSON of limit's data.
func (d *limitData) appendJSON(b []byte) []byte {
	b = append(b, `{"limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `,"reset":`...)
	b = strconv.AppendInt(b, d.Reset, 10)
	b = append(b, `,"success":`...)
	b = appendBool(b, d.Success)
	if d.OverrideID != "" {
		b = append(b, `,"overrideId":`...)
		b = appendString(b, d.OverrideID)
	}
	return append(b, '}')
}

// appendJSON appends the JSON of one check of multiLimit's data.
func (d *checkData) appendJSON(b []byte) []byte {
	b = append(b, `{"namespace":`...)
	b = appendString(b, d.Namespace)
	b = append(b, `,"identifier":`...)
	b = appendString(b, d.Identifier)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `,"reset":`...)
	b = strconv.AppendInt(b, d.Reset, 10)
	b = append(b, `,"passed":`...)
	b = appendBool(b, d.Passed)
	if d.OverrideID != "" {
		b = append(b, `,"overrideId":`...)
		b = appendString(b, d.OverrideID)
	}
	return append(b, '}')
}

// appendJSON appends the JSON of multiLimit's data.
func (d *multiData) appendJSON(b []byte) []byte {
	b = append(b, `{"passed":`...)
	b = appendBool(b, d.Passed)
	b = append(b, `,"limits":[`...)
	for i := range d.Limits {
		if i > 0 {
			b = append(b, ',')
		}
		b = d.Limits[i].appendJSON(b)
	}
	return append(b, "]}"...)
}

// appendMarshal appends v as encoding/json writes it without HTML escaping,
// for the endpoints off the hot path.
func appendMarshal(b []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return b, err
	}
	out := buf.Bytes()
	return out[:len(out)-1], nil // Encode ends with '\n'
}
