package server

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"
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
	// MaxWildcards bounds the '*' of an override's identifier: a decision
	// may place every literal run of every pattern whose pieces all occur
	// in its identifier, so the runs a pattern may hold bound its cost.
	MaxWildcards = 8
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

// errs collects field errors: at most MaxFieldErrors+1, so that a 400 can
// tell that more were found than it lists while a body of a million errors
// costs no more than one of twenty-one.
type errs []FieldError

// full reports whether e holds as many errors as it keeps.
func (e errs) full() bool { return len(e) > MaxFieldErrors }

func (e *errs) add(loc, msg, fix string) {
	if !e.full() {
		*e = append(*e, FieldError{Location: loc, Message: msg, Fix: fix})
	}
}

// decoder reads one request body with a [scanner] and collects the errors
// of its values. A syntax error ends the scan; it is reported at "body".
type decoder struct {
	scanner
	errs errs
}

func newDecoder(data []byte) decoder { return decoder{scanner: scanner{data: data}} }

// result returns the errors found: a syntax error first, then the errors
// of the values read before it.
func (d *decoder) result() errs {
	if d.failed() {
		d.errs = slices.Insert(d.errs, 0, FieldError{Location: "body", Message: "is not valid JSON: " + d.err})
	}
	return d.errs
}

// finish checks that nothing but white space follows the body's value.
func (d *decoder) finish() {
	if !d.failed() && !d.end() {
		d.errs.add("body", "has data after the JSON value", "Send exactly one JSON value.")
	}
}

// object is a JSON object being read member by member. A member's index in
// names is its bit in required and seen (at most 32 members).
type object struct {
	loc      string // "body"
	index    int    // the element's index in a body array, or -1
	names    []string
	required uint32
	seen     uint32
	started  bool
}

// path is the object's location: loc, or loc[index] for an array element.
func (o *object) path() string {
	if o.index < 0 {
		return o.loc
	}
	return o.loc + "[" + strconv.Itoa(o.index) + "]"
}

// field is the location of member i.
func (o *object) field(i int) string { return o.path() + "." + o.names[i] }

// lookup returns the index of the member name raw (escaped or not), or -1
// for an unknown name. Names match exactly, case included.
func (o *object) lookup(raw []byte, escaped bool) int {
	name := raw
	if escaped {
		s, _ := unescape(raw)
		name = []byte(s)
	}
	for i, n := range o.names {
		if string(name) == n {
			return i
		}
	}
	return -1
}

// unknownName returns the unknown member name raw (escaped or not) as an
// error repeats it (see echo).
func unknownName(raw []byte, escaped bool) string {
	if !escaped {
		// echo keeps at most MaxEchoBytes bytes; a few more tell it to cut.
		return echo(string(raw[:min(len(raw), MaxEchoBytes+utf8.UTFMax)]))
	}
	name, _ := unescape(raw)
	return echo(name)
}

// open reads the '{' of o. Any other value is passed over and, if it is
// valid JSON, reported as not an object: open returns false.
func (d *decoder) open(o *object) bool {
	if d.peek() == '{' {
		d.pos++
		return true
	}
	if d.skip(1) {
		d.errs.add(o.path(), "must be a JSON object", "Send a JSON object.")
	}
	return false
}

// next reads members up to the next known one that was not seen before,
// and returns its index with the scanner on its value. Unknown and repeated
// members are reported and passed over. It returns false at the closing
// '}' or a syntax error.
func (d *decoder) next(o *object) (int, bool) {
	for !d.failed() {
		c := d.peek()
		if o.started {
			if c == '}' {
				d.pos++
				return 0, false
			}
			if c != ',' {
				d.unexpected("after object key:value pair")
				return 0, false
			}
			d.pos++
			c = d.peek()
		} else {
			o.started = true
			if c == '}' {
				d.pos++
				return 0, false
			}
		}
		if c != '"' {
			d.unexpected("looking for beginning of object key string")
			return 0, false
		}
		raw, escaped, ok := d.str()
		if !ok {
			return 0, false
		}
		if d.peek() != ':' {
			d.unexpected("after object key")
			return 0, false
		}
		d.pos++
		i := o.lookup(raw, escaped)
		switch {
		case i < 0:
			if !d.errs.full() {
				d.errs.add(o.path()+"."+unknownName(raw, escaped), "is not a known field", "Remove it; allowed fields: "+strings.Join(o.names, ", ")+".")
			}
		case o.seen&(1<<i) != 0:
			d.errs.add(o.field(i), "appears more than once", "Send each field once.")
		default:
			o.seen |= 1 << i
			return i, true
		}
		d.skip(2)
	}
	return 0, false
}

// members reads the object o: it calls member with the index of every known
// member seen for the first time, with the scanner on its value, then
// reports the required members that o lacks.
func (d *decoder) members(o *object, member func(i int)) {
	if !d.open(o) {
		return
	}
	for {
		i, ok := d.next(o)
		if !ok {
			break
		}
		member(i)
	}
	d.close(o)
}

// close reports the required members that o lacks.
func (d *decoder) close(o *object) {
	if d.failed() {
		return
	}
	for i := range o.names {
		if o.required&(1<<i) != 0 && o.seen&(1<<i) == 0 {
			d.errs.add(o.field(i), "is required", "")
		}
	}
}

// wrongType reports that member i's value is not of the type its rule
// wants, and passes over the value.
func (d *decoder) wrongType(o *object, i int, msg string) {
	if d.skip(2) {
		d.errs.add(o.field(i), msg, "")
	}
}

// stringValue reads member i's value as a string whose bytes are valid UTF-8 and
// whose escapes contain no unpaired surrogate (encoding/json would silently
// replace both with U+FFFD).
func (d *decoder) stringValue(o *object, i int) (string, bool) {
	if d.peek() != '"' {
		d.wrongType(o, i, "must be a string")
		return "", false
	}
	raw, escaped, ok := d.str()
	switch {
	case !ok:
		return "", false
	case !utf8.Valid(raw):
		d.errs.add(o.field(i), "is not valid UTF-8", "")
		return "", false
	case !escaped:
		return string(raw), true
	}
	s, lone := unescape(raw)
	if lone {
		d.errs.add(o.field(i), "contains an unpaired UTF-16 surrogate escape", "")
		return "", false
	}
	return s, true
}

// name reads member i's value as a namespace or identifier into dst: a JSON
// string of 1..MaxNameBytes bytes of valid, printable UTF-8.
func (d *decoder) name(o *object, i int, dst *string) {
	s, ok := d.stringValue(o, i)
	if !ok {
		return
	}
	if msg, fix := checkName(s); msg != "" {
		d.errs.add(o.field(i), msg, fix)
		return
	}
	*dst = s
}

// integer reads member i's value into dst: a JSON integer in [lo, hi]
// (hi <= MaxSafeInteger), without fraction or exponent.
func (d *decoder) integer(o *object, i int, lo, hi int64, dst *int64) {
	if c := d.peek(); c != '-' && (c < '0' || c > '9') {
		d.wrongType(o, i, "must be an integer")
		return
	}
	raw, ok := d.number()
	if !ok {
		return
	}
	v, isInt, safe := parseSafeInt(raw)
	switch {
	case !isInt:
		d.errs.add(o.field(i), "must be an integer, without fraction or exponent", "")
	case !safe:
		d.errs.add(o.field(i), "is outside the safe integer range (|n| <= 2^53-1)", fmt.Sprintf("Use a value between %d and %d.", lo, hi))
	case v < lo || v > hi:
		d.errs.add(o.field(i), fmt.Sprintf("is %d; it must be between %d and %d", v, lo, hi), "")
	default:
		*dst = v
	}
}

// parseSafeInt parses a JSON number that the scanner validated: isInt is
// false if it has a fraction or an exponent, safe is false if its magnitude
// exceeds MaxSafeInteger.
func parseSafeInt(raw []byte) (v int64, isInt, safe bool) {
	if bytes.ContainsAny(raw, ".eE") {
		return 0, false, false
	}
	digits := raw
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) > 16 { // 2^53-1 has 16 digits; JSON has no leading zeros
		return 0, true, false
	}
	for _, c := range digits {
		v = v*10 + int64(c-'0')
	}
	if v > MaxSafeInteger {
		return 0, true, false
	}
	if raw[0] == '-' {
		v = -v
	}
	return v, true, true
}

// checkName returns the rule a namespace or identifier breaks, with its fix,
// or "" if it breaks none.
func checkName(s string) (msg, fix string) {
	switch {
	case len(s) == 0:
		return "must not be empty", ""
	case len(s) > MaxNameBytes:
		return fmt.Sprintf("is %d bytes long; the maximum is %d", len(s), MaxNameBytes), ""
	}
	for i, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Sprintf("contains the non-printable character %U at byte %d", r, i), "Use printable UTF-8 only (no control characters)."
		}
	}
	return "", ""
}

// Members of a limit body, by index in limitNames.
const (
	limitNamespace = iota
	limitIdentifier
	limitLimit
	limitDuration
	limitCost
)

var limitNames = []string{"namespace", "identifier", "limit", "duration", "cost"}

// limit reads one limit body, the element index of a body array or -1.
// Cost defaults to 1.
func (d *decoder) limit(index int) limitInput {
	in := limitInput{Cost: 1}
	o := object{loc: "body", index: index, names: limitNames, required: 1<<limitNamespace | 1<<limitIdentifier | 1<<limitLimit | 1<<limitDuration}
	d.members(&o, func(i int) {
		switch i {
		case limitNamespace:
			d.name(&o, i, &in.Namespace)
		case limitIdentifier:
			d.name(&o, i, &in.Identifier)
		case limitLimit:
			d.integer(&o, i, 0, MaxSafeInteger, &in.Limit)
		case limitDuration:
			d.integer(&o, i, MinDurationMS, MaxDurationMS, &in.Duration)
		case limitCost:
			d.integer(&o, i, 0, MaxSafeInteger, &in.Cost)
		}
	})
	return in
}

// decodeLimit decodes a ratelimit.limit body. Cost defaults to 1.
func decodeLimit(data []byte) (limitInput, errs) {
	d := newDecoder(data)
	in := d.limit(-1)
	d.finish()
	return in, d.result()
}

// decodeMultiLimit decodes a ratelimit.multiLimit body: a JSON array of
// 1..MaxChecks limit bodies. Elements beyond MaxChecks are validated as
// JSON and counted, not decoded.
func decodeMultiLimit(data []byte) ([]limitInput, errs) {
	d := newDecoder(data)
	if d.peek() != '[' {
		if d.skip(1) {
			d.errs.add("body", "must be a JSON array of limit requests", "Send a JSON array of 1 to 100 limit requests.")
		}
		return nil, d.result()
	}
	d.pos++
	var ins []limitInput
	n := 0
	if d.peek() == ']' {
		d.pos++
	} else {
		for !d.failed() {
			if n < MaxChecks {
				ins = append(ins, d.limit(n))
			} else {
				d.skip(1)
			}
			n++
			if c := d.peek(); c == ',' {
				d.pos++
				continue
			} else if c == ']' {
				d.pos++
				break
			}
			d.unexpected("after array element")
		}
	}
	d.finish()
	if d.failed() {
		return nil, d.result()
	}
	if n == 0 || n > MaxChecks {
		d.errs.add("body", fmt.Sprintf("must hold between 1 and %d limit requests", MaxChecks), "Split the checks over several calls.")
	}
	return ins, d.errs
}

// Members of a setOverride body, and of a get/deleteOverride body (the first
// two), by index in overrideNames.
const (
	overrideNamespace = iota
	overrideIdentifier
	overrideLimit
	overrideDuration
)

var overrideNames = []string{"namespace", "identifier", "limit", "duration"}

// decodeSetOverride decodes a ratelimit.setOverride body. The identifier may
// contain '*' wildcards.
func decodeSetOverride(data []byte) (overrideInput, errs) {
	var in overrideInput
	d := newDecoder(data)
	o := object{loc: "body", index: -1, names: overrideNames, required: 0b1111}
	d.members(&o, func(i int) {
		switch i {
		case overrideNamespace:
			d.name(&o, i, &in.Namespace)
		case overrideIdentifier:
			d.name(&o, i, &in.Identifier)
		case overrideLimit:
			d.integer(&o, i, 0, MaxSafeInteger, &in.Limit)
		case overrideDuration:
			d.integer(&o, i, MinDurationMS, MaxDurationMS, &in.Duration)
		}
	})
	d.finish()
	if strings.Count(in.Identifier, "*") > MaxWildcards {
		d.errs.add(o.field(overrideIdentifier), fmt.Sprintf("holds more than %d '*' wildcards", MaxWildcards), "Use fewer wildcards: each '*' matches any run of bytes, so consecutive ones can be merged.")
	}
	return in, d.result()
}

// decodeOverrideRef decodes a getOverride or deleteOverride body.
func decodeOverrideRef(data []byte) (overrideRef, errs) {
	var in overrideRef
	d := newDecoder(data)
	o := object{loc: "body", index: -1, names: overrideNames[:2], required: 0b11}
	d.members(&o, func(i int) {
		switch i {
		case overrideNamespace:
			d.name(&o, i, &in.Namespace)
		case overrideIdentifier:
			d.name(&o, i, &in.Identifier)
		}
	})
	d.finish()
	return in, d.result()
}

// Members of a listOverrides body, by index in listNames.
const (
	listNamespace = iota
	listCursor
	listLimit
)

var listNames = []string{"namespace", "cursor", "limit"}

// decodeList decodes a listOverrides body.
func decodeList(data []byte) (listInput, errs) {
	in := listInput{Limit: DefaultListLimit}
	var limit int64 = DefaultListLimit
	d := newDecoder(data)
	o := object{loc: "body", index: -1, names: listNames, required: 1 << listNamespace}
	d.members(&o, func(i int) {
		switch i {
		case listNamespace:
			d.name(&o, i, &in.Namespace)
		case listCursor:
			d.cursor(&o, i, &in.After)
		case listLimit:
			d.integer(&o, i, 1, MaxListLimit, &limit)
		}
	})
	d.finish()
	in.Limit = int(limit)
	return in, d.result()
}

// cursor reads member i's value, a cursor from a previous page, into dst as
// the identifier it stands for.
func (d *decoder) cursor(o *object, i int, dst *string) {
	s, ok := d.stringValue(o, i)
	if !ok {
		return
	}
	after, ok := decodeCursor(s)
	if !ok {
		d.errs.add(o.field(i), "is not a cursor returned by listOverrides", "Pass pagination.cursor from the previous page unchanged, or omit it.")
		return
	}
	*dst = after
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
