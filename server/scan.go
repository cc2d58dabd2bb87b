package server

import (
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of arrays and objects in a request body, as
// encoding/json bounds it.
const maxDepth = 10000

// scanner reads one JSON text (RFC 8259) strictly: everything it passes over
// is validated, it stops at the first syntax error and keeps its
// description, and it allocates only for the strings its callers keep.
type scanner struct {
	data []byte
	pos  int
	err  string // the first syntax error, "" if none
}

// failed reports whether a syntax error stopped the scan.
func (s *scanner) failed() bool { return s.err != "" }

// fail records a syntax error, unless one is recorded already, and returns
// false.
func (s *scanner) fail(msg string) bool {
	if s.err == "" {
		s.err = msg
	}
	return false
}

// unexpected records a syntax error for the byte at pos, found where
// context says.
func (s *scanner) unexpected(context string) bool {
	if s.pos >= len(s.data) {
		return s.fail("unexpected end of input")
	}
	return s.fail(fmt.Sprintf("invalid character %s %s (at byte %d)", quoteByte(s.data[s.pos]), context, s.pos))
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f && c != '\'' {
		return "'" + string(rune(c)) + "'"
	}
	return fmt.Sprintf("0x%02x", c)
}

// peek skips white space and returns the next byte, or 0 at the end.
func (s *scanner) peek() byte {
	for s.pos < len(s.data) {
		switch c := s.data[s.pos]; c {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return c
		}
	}
	return 0
}

// skip passes over the value at pos, validating it; depth is the nesting
// of that value.
func (s *scanner) skip(depth int) bool {
	if depth > maxDepth {
		return s.fail(fmt.Sprintf("exceeded max depth of %d", maxDepth))
	}
	switch c := s.peek(); {
	case c == '{':
		return s.skipObject(depth)
	case c == '[':
		return s.skipArray(depth)
	case c == '"':
		_, _, ok := s.str()
		return ok
	case c == '-' || c >= '0' && c <= '9':
		_, ok := s.number()
		return ok
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		return s.unexpected("looking for beginning of value")
	}
}

func (s *scanner) skipObject(depth int) bool {
	s.pos++ // '{'
	if s.peek() == '}' {
		s.pos++
		return true
	}
	for {
		if s.peek() != '"' {
			return s.unexpected("looking for beginning of object key string")
		}
		if _, _, ok := s.str(); !ok {
			return false
		}
		if s.peek() != ':' {
			return s.unexpected("after object key")
		}
		s.pos++
		if !s.skip(depth + 1) {
			return false
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return true
		default:
			return s.unexpected("after object key:value pair")
		}
	}
}

func (s *scanner) skipArray(depth int) bool {
	s.pos++ // '['
	if s.peek() == ']' {
		s.pos++
		return true
	}
	for {
		if !s.skip(depth + 1) {
			return false
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return true
		default:
			return s.unexpected("after array element")
		}
	}
}

// literal reads true, false or null.
func (s *scanner) literal(word string) bool {
	for i := 0; i < len(word); i++ {
		if s.pos >= len(s.data) || s.data[s.pos] != word[i] {
			return s.unexpected("in literal " + word)
		}
		s.pos++
	}
	return true
}

// str reads the string at pos (a '"'): it returns the bytes between the
// quotes and whether they contain escapes. Bytes of 0x80 and above pass
// unchecked; callers that keep a string check its UTF-8.
func (s *scanner) str() (raw []byte, escaped, ok bool) {
	start := s.pos + 1
	for i := start; i < len(s.data); {
		switch c := s.data[i]; {
		case c == '"':
			s.pos = i + 1
			return s.data[start:i], escaped, true
		case c == '\\':
			escaped = true
			n := escapeLen(s.data[i:])
			if n == 0 {
				s.pos = min(i+1, len(s.data))
				return nil, false, s.unexpected("in string escape code")
			}
			i += n
		case c < 0x20:
			s.pos = i
			return nil, false, s.unexpected("in string literal")
		default:
			i++
		}
	}
	s.pos = len(s.data)
	return nil, false, s.unexpected("")
}

// escapeLen returns the length of the valid escape sequence at the start of
// b (a '\\'), or 0 if it is not one.
func escapeLen(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	switch b[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if len(b) < 6 {
			return 0
		}
		for _, h := range b[2:6] {
			if hexValue(h) < 0 {
				return 0
			}
		}
		return 6
	}
	return 0
}

func hexValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func hex4(b []byte) rune {
	return rune(hexValue(b[0])<<12 | hexValue(b[1])<<8 | hexValue(b[2])<<4 | hexValue(b[3]))
}

// unescape decodes the content of a string that str validated. A \u escape
// of a UTF-16 surrogate that is not part of a pair becomes U+FFFD and sets
// lone.
func unescape(raw []byte) (s string, lone bool) {
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			b = append(b, c)
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r := hex4(raw[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					r2 = hex4(raw[i+2:])
				}
				if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
					r = pair
					i += 6
				} else {
					r, lone = utf8.RuneError, true
				}
			}
			b = utf8.AppendRune(b, r)
			continue
		default: // '"', '\\', '/'
			b = append(b, raw[i+1])
		}
		i += 2
	}
	return string(b), lone
}

// number reads the number at pos and returns its bytes.
func (s *scanner) number() ([]byte, bool) {
	start := s.pos
	if s.pos < len(s.data) && s.data[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(s.data) && s.data[s.pos] == '0':
		s.pos++
	case s.digits() == 0:
		return nil, s.unexpected("in numeric literal")
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return nil, s.unexpected("after decimal point in numeric literal")
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return nil, s.unexpected("in exponent of numeric literal")
		}
	}
	return s.data[start:s.pos], true
}

// digits passes over a run of decimal digits and returns its length.
func (s *scanner) digits() int {
	start := s.pos
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		s.pos++
	}
	return s.pos - start
}

// end checks that only white space follows the value.
func (s *scanner) end() bool {
	if s.peek() != 0 || s.pos < len(s.data) {
		return false
	}
	return true
}
