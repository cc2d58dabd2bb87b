package sim

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseTraceCSVAndJSONLines(t *testing.T) {
	csvText := "time,identifier,namespace,cost,node,region\n" +
		"1800000000500,alice,api,2,1,0\n" +
		"2027-01-15T08:00:00.250Z,bob,,,,\n" +
		"1800000000100,alice,api,0,,1\n"
	jsonText := `
{"time": 1800000000500, "identifier": "alice", "namespace": "api", "cost": 2, "node": 1, "region": 0}
{"time": "2027-01-15T08:00:00.250Z", "identifier": "bob"}
{"time": 1800000000100, "identifier": "alice", "namespace": "api", "cost": 0, "region": 1, "node": null}
`
	bob := time.Date(2027, 1, 15, 8, 0, 0, 250e6, time.UTC).UnixMilli() // 1800000000250
	want := []TraceRequest{                                             // sorted by time
		{Time: 1800000000100, Namespace: "api", Identifier: "alice", Cost: 0, Region: 1, Node: -1, Line: 4},
		{Time: bob, Namespace: "default", Identifier: "bob", Cost: 1, Region: -1, Node: -1, Line: 3},
		{Time: 1800000000500, Namespace: "api", Identifier: "alice", Cost: 2, Region: 0, Node: 1, Line: 2},
	}
	for name, text := range map[string]string{"t.csv": csvText, "t.jsonl": jsonText} {
		tr, err := ParseTrace(name, []byte(text))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(tr.Requests, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, tr.Requests, want)
		}
	}
}

func TestParseTraceErrors(t *testing.T) {
	tests := []struct {
		file, text, want string
	}{
		{"a.csv", "time,who\n1,a\n", "a.csv:1: field who: unknown column"},
		{"a.csv", "time,cost\n1,1\n", "a.csv:1: field identifier: required column missing"},
		{"a.csv", "time,identifier\n1,a\nyesterday,b\n", `a.csv:3: field time: want Unix milliseconds or an RFC 3339 time, got "yesterday"`},
		{"a.csv", "time,identifier,cost\n1,a,1\n2,b,-3\n", `a.csv:3: field cost: want a non-negative integer, got "-3"`},
		{"a.csv", "time,identifier,node\n1,a,x\n", `a.csv:2: field node: want an index from 0, got "x"`},
		{"a.csv", "time,identifier\n1,\n", "a.csv:2: field identifier: empty"},
		{"a.csv", "time,identifier\n1,a,3\n", "a.csv:2: wrong number of fields"},
		{"a.csv", "time,identifier\n", "a.csv: the trace holds no request"},
		{"a.csv", "", "a.csv: empty trace"},
		{"a.jsonl", `{"time": 1, "identifier": "a", "weight": 2}`, "a.jsonl:1: field weight: unknown member"},
		{"a.jsonl", "{\"time\": 1, \"identifier\": \"a\"}\n{\"identifier\": \"b\"}", "a.jsonl:2: field time: required, missing"},
		{"a.jsonl", `{"time": 1, "identifier": 7}`, "a.jsonl:1: field identifier: want a string, got 7"},
		{"a.jsonl", `{"time": 1, "identifier": "a", "cost": "2"}`, `a.jsonl:1: field cost: want a number, got "2"`},
		{"a.jsonl", `{"time": 1, "identifier": "a", "cost": 1.5}`, `a.jsonl:1: field cost: want a non-negative integer, got "1.5"`},
		{"a.jsonl", "{\"time\": 1, \"identifier\": \"a\"}\n{\"time\": 2,", "a.jsonl:2: want a JSON object"},
	}
	for _, tc := range tests {
		_, err := ParseTrace(tc.file, []byte(tc.text))
		if err == nil || !strings.HasPrefix(err.Error(), "sim: "+tc.want) {
			t.Errorf("%q:\n got %v\nwant sim: %s…", tc.text, err, tc.want)
		}
	}
}

// randomTrace makes n requests at rate × limit per window over identifiers,
// with costs 0 to 3, the first ones pinned to nodes.
func randomTrace(n, identifiers int, window time.Duration) Trace {
	rng := rand.New(rand.NewPCG(9, 9))
	t := int64(1_800_000_000_123)
	var tr Trace
	tr.File = "random.csv"
	for i := range n {
		t += rng.Int64N(2 * window.Milliseconds() * int64(identifiers) / int64(n) * 10)
		tr.Requests = append(tr.Requests, TraceRequest{
			Time: t, Namespace: "api", Identifier: fmt.Sprintf("u%d", rng.IntN(identifiers)),
			Cost: rng.Int64N(4), Region: -1, Node: -1, Line: i + 2,
		})
	}
	return tr
}

func TestRunTrace(t *testing.T) {
	t.Parallel() // one core of simulation: the package's long runs share both
	tr := randomTrace(20_000, 5, 10*time.Second)
	one := TraceDeployment{Name: "one", Regions: 1, Nodes: 1, Limit: 50, Window: 10 * time.Second}
	res, err := RunTrace(tr, one, 1)
	if err != nil {
		t.Fatal(err)
	}
	// One node makes exactly the model's decisions, costs and peeks included.
	if res.Admitted != res.Reference || res.OverPct != 0 || res.UnderPct != 0 || res.Requests != 20_000 || res.Band != nil || !res.InBand {
		t.Errorf("one node: %+v", res)
	}
	if res.Identifiers != 5 || res.Identities[0].Namespace != "api" || res.Reference == 0 {
		t.Errorf("identities: %d, %+v", res.Identifiers, res.Identities)
	}
	three := TraceDeployment{Name: "three", Regions: 2, Nodes: 3, Limit: 50, Window: 10 * time.Second, GlobalInterval: time.Second}
	a, err := RunTrace(tr, three, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunTrace(tr, three, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("two replays of one trace with one seed differ")
	}
	if a.Reference != res.Reference || len(a.Series) != 2 || a.Traffic != "trace" {
		t.Errorf("the reference of one trace changed with the deployment (%d, %d) or the series are wrong: %+v", a.Reference, res.Reference, a.Series)
	}
	t.Logf("2 regions × 3 nodes: admitted %d, reference %d, over %v%%, worst span %v", a.Admitted, a.Reference, a.OverPct, a.WorstSpan)
}

func TestRunTraceErrors(t *testing.T) {
	tr := Trace{File: "t.csv", Requests: []TraceRequest{
		{Time: 1000, Identifier: "a", Namespace: "default", Cost: 1, Region: -1, Node: -1, Line: 2},
		{Time: 2000, Identifier: "a", Namespace: "default", Cost: 1, Region: 2, Node: -1, Line: 3},
	}}
	dep := TraceDeployment{Name: "t", Regions: 2, Nodes: 1, Limit: 10, Window: time.Second}
	if _, err := RunTrace(tr, dep, 1); err == nil || err.Error() != "sim: t.csv:3: field region: 2 is not a region of 2" {
		t.Errorf("got %v", err)
	}
	dep.Limit = 0
	if _, err := RunTrace(tr, dep, 1); err == nil || !strings.Contains(err.Error(), "field limit") {
		t.Errorf("got %v", err)
	}
	dep.Limit, dep.Window = 10, time.Millisecond
	tr.Requests[1].Time, tr.Requests[1].Region = 1_000_000_000, -1
	if _, err := RunTrace(tr, dep, 1); err == nil || !strings.Contains(err.Error(), "more than the simulator tallies") {
		t.Errorf("got %v", err)
	}
}
