package server

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDecodeRules covers every rule of the hand-written decoder, each with
// the first error it reports ("" for a valid body).
func TestDecodeRules(t *testing.T) {
	const ok = `"namespace":"n","identifier":"i","limit":1,"duration":60000`
	for _, tc := range []struct {
		name, body string
		want       string // substring of "location: message" of the first error
	}{
		{"valid", `{` + ok + `}`, ""},
		{"white space everywhere", " \t\r\n{ \"namespace\" : \"n\" ,\n\"identifier\":\"i\",\"limit\" :1,\"duration\": 60000 } \n", ""},
		{"escaped member name matches", `{"n\u0061mespace":"n","identifier":"i","limit":1,"duration":60000}`, ""},
		{"escaped duplicate name", `{` + ok + `,"n\u0061mespace":"m"}`, "body.namespace: appears more than once"},
		{"surrogate pair", `{"namespace":"n","identifier":"\ud83d\ude00","limit":1,"duration":60000}`, ""},
		{"every simple escape", `{"namespace":"\"\\\/","identifier":"i","limit":1,"duration":60000}`, ""},
		{"escaped control character", `{"namespace":"n\n","identifier":"i","limit":1,"duration":60000}`, "body.namespace: contains the non-printable character U+000A"},
		{"minus zero", `{` + ok + `,"cost":-0}`, ""},
		{"limit 0", `{"namespace":"n","identifier":"i","limit":0,"duration":60000}`, ""},
		{"-(2^53-1) is safe but below the range", `{` + ok + `,"cost":-9007199254740991}`, "body.cost: is -9007199254740991; it must be between 0"},
		{"-(2^53) is unsafe", `{` + ok + `,"cost":-9007199254740992}`, "body.cost: is outside the safe integer range"},
		{"17 digits", `{` + ok + `,"cost":10000000000000000}`, "body.cost: is outside the safe integer range"},
		{"huge exponent", `{` + ok + `,"cost":1e400}`, "body.cost: must be an integer, without fraction or exponent"},
		{"fraction zero", `{` + ok + `,"cost":1.0}`, "without fraction"},
		{"cost true", `{` + ok + `,"cost":true}`, "body.cost: must be an integer"},
		{"cost object", `{` + ok + `,"cost":{"a":[1]}}`, "body.cost: must be an integer"},
		{"namespace array", `{"namespace":["n"],"identifier":"i","limit":1,"duration":60000}`, "body.namespace: must be a string"},
		{"namespace null", `{"namespace":null,"identifier":"i","limit":1,"duration":60000}`, "body.namespace: must be a string"},
		{"unknown member with nested value", `{` + ok + `,"x":{"y":[1,{"z":null}]}}`, "body.x: is not a known field"},
		{"unknown member lists the allowed ones", `{` + ok + `,"x":1}`, "body.x: is not a known field"},
		{"unknown member with invalid UTF-8 name", "{" + ok + ",\"a\xffb\":1}", "body.a\uFFFDb: is not a known field"},
		{"unknown member with lone surrogate name", `{` + ok + `,"a\udc00":1}`, "body.a\uFFFD: is not a known field"},
		{"invalid UTF-8 in a known string", "{\"namespace\":\"\xc3\x28\",\"identifier\":\"i\",\"limit\":1,\"duration\":60000}", "body.namespace: is not valid UTF-8"},
		{"UTF-8 encoded surrogate", "{\"namespace\":\"\xed\xa0\x80\",\"identifier\":\"i\",\"limit\":1,\"duration\":60000}", "body.namespace: is not valid UTF-8"},
		{"high surrogate then non-surrogate", `{"namespace":"\ud800\u0041","identifier":"i","limit":1,"duration":60000}`, "surrogate"},
		{"low surrogate alone", `{"namespace":"\udc00","identifier":"i","limit":1,"duration":60000}`, "surrogate"},
		{"several errors in order", `{"namespace":"","identifier":1,"limit":-1,"duration":60000}`, "body.namespace: must not be empty"},
		{"empty object", `{}`, "body.namespace: is required"},
		{"only white space", " \n", "body: is not valid JSON: unexpected end of input"},
		{"NUL byte", "\x00", "body: is not valid JSON: invalid character 0x00"},
		{"string body", `"x"`, "body: must be a JSON object"},
		{"number body", `1`, "body: must be a JSON object"},
		{"bare word", `nope`, "body: is not valid JSON"},
		{"raw control character in string", "{\"namespace\":\"a\nb\"}", "body: is not valid JSON: invalid character 0x0a in string literal"},
		{"unknown escape", `{"namespace":"a\x"}`, "body: is not valid JSON: invalid character 'x' in string escape code"},
		{"short unicode escape", `{"namespace":"\u12"}`, "in string escape code"},
		{"unterminated string", `{"namespace":"abc`, "unexpected end of input"},
		{"leading zero", `{` + ok + `,"cost":01}`, "body: is not valid JSON"},
		{"lone minus", `{` + ok + `,"cost":-}`, "in numeric literal"},
		{"plus sign", `{` + ok + `,"cost":+1}`, "looking for beginning of value"},
		{"dot without digits", `{` + ok + `,"cost":1.}`, "after decimal point"},
		{"exponent without digits", `{` + ok + `,"cost":1e+}`, "in exponent"},
		{"trailing comma", `{` + ok + `,}`, "looking for beginning of object key string"},
		{"missing colon", `{"namespace" "n"}`, "after object key"},
		{"missing comma", `{"namespace":"n" "identifier":"i"}`, "after object key:value pair"},
		{"non-string key", `{1:2}`, "looking for beginning of object key string"},
		{"bad literal", `{` + ok + `,"x":tru}`, "in literal true"},
		{"single quotes", `{'namespace':'n'}`, "body: is not valid JSON"},
		{"comment", `{` + ok + `}// hi`, "has data after the JSON value"},
		{"two objects", `{` + ok + `}{}`, "has data after the JSON value"},
		{"deep nesting in an unknown member", `{` + ok + `,"x":` + strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1) + `}`, "exceeded max depth"},
		{"syntax error before the field errors", `{"namespace":"","identifier":`, "body: is not valid JSON: unexpected end of input"},
		{"not an object and not JSON", `[1,`, "body: is not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, es := decodeLimit([]byte(tc.body))
			if tc.want == "" {
				if len(es) > 0 {
					t.Fatalf("errors %v, want none", es)
				}
				return
			}
			if len(es) == 0 {
				t.Fatalf("no error, want %q", tc.want)
			}
			if got := es[0].Location + ": " + es[0].Message; !strings.Contains(got, tc.want) {
				t.Fatalf("first error %q, want it to contain %q (all: %v)", got, tc.want, es)
			}
		})
	}
}

// TestDecodeValues checks the values decoded from valid bodies.
func TestDecodeValues(t *testing.T) {
	in, es := decodeLimit([]byte(`{"cost":0,"duration":1000,"limit":9007199254740991,"identifier":"\u00e9\ud83d\ude00\\x","namespace":"api"}`))
	want := limitInput{Namespace: "api", Identifier: "é😀\\x", Limit: MaxSafeInteger, Duration: 1000, Cost: 0}
	if len(es) > 0 || in != want {
		t.Fatalf("decodeLimit = %+v, %v; want %+v", in, es, want)
	}
	in, es = decodeLimit([]byte(`{"namespace":"a","identifier":"b","limit":5,"duration":60000}`))
	if len(es) > 0 || in.Cost != 1 {
		t.Fatalf("cost %d (%v), want the default 1", in.Cost, es)
	}
	list, es := decodeList([]byte(`{"namespace":"n","cursor":"` + encodeCursor("user_9") + `","limit":100}`))
	if len(es) > 0 || list != (listInput{Namespace: "n", After: "user_9", Limit: 100}) {
		t.Fatalf("decodeList = %+v, %v", list, es)
	}
	ov, es := decodeSetOverride([]byte(`{"namespace":"n","identifier":"user_*","limit":0,"duration":1000}`))
	if len(es) > 0 || ov != (overrideInput{Namespace: "n", Identifier: "user_*", Limit: 0, Duration: 1000}) {
		t.Fatalf("decodeSetOverride = %+v, %v", ov, es)
	}
	ref, es := decodeOverrideRef([]byte(`{"identifier":"i","namespace":"n"}`))
	if len(es) > 0 || ref != (overrideRef{Namespace: "n", Identifier: "i"}) {
		t.Fatalf("decodeOverrideRef = %+v, %v", ref, es)
	}
}

// TestDecodeOtherBodies covers the rules of the bodies other than limit.
func TestDecodeOtherBodies(t *testing.T) {
	check := `{"namespace":"n","identifier":"i","limit":1,"duration":60000}`
	for _, tc := range []struct {
		name   string
		decode func([]byte) errs
		body   string
		want   string
	}{
		{"multi: white space", multi, " [ " + check + " , " + check + " ] ", ""},
		{"multi: element not an object", multi, `[` + check + `,7]`, "body[1]: must be a JSON object"},
		{"multi: element located", multi, `[` + check + `,{"namespace":"n","identifier":"i","limit":1,"duration":60000,"x":1}]`, "body[1].x: is not a known field"},
		{"multi: trailing comma", multi, `[` + check + `,]`, "body: is not valid JSON"},
		{"multi: missing comma", multi, `[` + check + check + `]`, "after array element"},
		{"multi: unterminated", multi, `[` + check, "unexpected end of input"},
		{"multi: 101 invalid elements beyond 100 are still validated", multi, `[` + strings.Repeat(check+",", 100) + `{"a":}]`, "body: is not valid JSON"},
		{"multi: empty body", multi, ``, "unexpected end of input"},
		{"list: limit 0", list, `{"namespace":"n","limit":0}`, "body.limit: is 0; it must be between 1 and 100"},
		{"list: limit 101", list, `{"namespace":"n","limit":101}`, "body.limit"},
		{"list: bad cursor", list, `{"namespace":"n","cursor":"!!"}`, "body.cursor: is not a cursor"},
		{"list: cursor not a string", list, `{"namespace":"n","cursor":1}`, "body.cursor: must be a string"},
		{"list: unknown member", list, `{"namespace":"n","after":"x"}`, "body.after: is not a known field"},
		{"set: cost is not a member", set, `{"namespace":"n","identifier":"i","limit":1,"duration":1000,"cost":1}`, "body.cost: is not a known field"},
		{"set: missing duration", set, `{"namespace":"n","identifier":"i","limit":1}`, "body.duration: is required"},
		{"ref: limit is not a member", ref, `{"namespace":"n","identifier":"i","limit":1}`, "body.limit: is not a known field"},
		{"ref: trailing data", ref, `{"namespace":"n","identifier":"i"} 1`, "has data after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es := tc.decode([]byte(tc.body))
			if tc.want == "" {
				if len(es) > 0 {
					t.Fatalf("errors %v, want none", es)
				}
				return
			}
			if len(es) == 0 || !strings.Contains(es[0].Location+": "+es[0].Message, tc.want) {
				t.Fatalf("errors %v, want the first to contain %q", es, tc.want)
			}
		})
	}
}

func multi(b []byte) errs { _, es := decodeMultiLimit(b); return es }
func list(b []byte) errs  { _, es := decodeList(b); return es }
func set(b []byte) errs   { _, es := decodeSetOverride(b); return es }
func ref(b []byte) errs   { _, es := decodeOverrideRef(b); return es }

// FuzzDecodeAgreesWithEncodingJSON checks the hand-written decoder against
// encoding/json: a body is reported as invalid JSON exactly when
// json.Valid rejects it, and a body accepted without error holds exactly the
// values encoding/json reads from it.
func FuzzDecodeAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"namespace":"n","identifier":"i","limit":1,"duration":60000}`,
		`{"namespace":"n\u0041","identifier":"\ud83d\ude00","limit":0,"duration":1000,"cost":-0}`,
		`{"namespace":"n","identifier":"i","limit":1e3,"duration":60000,"x":[{"y":null},true,false,-1.5E+2]}`,
		`{"namespace":"n","namespace":"m"}`, `[]`, `null`, `{`, "\xff", `{"a":01}`, `"\u12"`, ` {} `, `{}x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, es := decodeLimit(body)
		syntax := false
		for _, e := range es {
			syntax = syntax || strings.HasPrefix(e.Message, "is not valid JSON") || strings.HasPrefix(e.Message, "has data after")
		}
		if valid := json.Valid(body); valid == syntax {
			t.Fatalf("json.Valid = %v, but the decoder's errors are %v", valid, es)
		}
		if len(es) > 0 {
			return
		}
		var ref struct {
			Namespace, Identifier string
			Limit, Duration, Cost *int64
		}
		if err := json.Unmarshal(body, &ref); err != nil {
			t.Fatalf("accepted a body encoding/json rejects: %v", err)
		}
		cost := int64(1)
		if ref.Cost != nil {
			cost = *ref.Cost
		}
		if ref.Limit == nil || ref.Duration == nil || in != (limitInput{ref.Namespace, ref.Identifier, *ref.Limit, *ref.Duration, cost}) {
			t.Fatalf("decoded %+v, encoding/json read %+v", in, ref)
		}
	})
}
