package server

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestParseHashedRootKey(t *testing.T) {
	hash := HashRootKey("s3cret")
	for _, tc := range []struct {
		name, in string
		ws       string
		wantErr  bool
	}{
		{"hash and workspace", hash + ":acme", "acme", false},
		{"upper-case hex", strings.ToUpper(hash) + ":acme", "acme", false},
		{"no colon", hash, "", true},
		{"empty workspace", hash + ":", "", true},
		{"plaintext key instead of its hash", "s3cret:acme", "", true},
		{"hash one digit short", hash[1:] + ":acme", "", true},
		{"hash one digit long", hash + "0:acme", "", true},
		{"not hex", strings.Repeat("zz", 32) + ":acme", "", true},
		{"space in workspace", hash + ":ac me", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ParseHashedRootKey(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidRootKey) {
					t.Fatalf("err = %v, want ErrInvalidRootKey", err)
				}
				if i := strings.LastIndexByte(tc.in, ':'); i > 0 && strings.Contains(err.Error(), tc.in[:i]) {
					t.Fatalf("the error quotes the hash: %v", err)
				}
				return
			}
			if err != nil || k.Key != "" || k.Workspace != tc.ws || hex.EncodeToString(k.SHA256[:]) != hash {
				t.Fatalf("got %+v, %v", k, err)
			}
		})
	}
}

func TestKeyring(t *testing.T) {
	hashed, err := ParseHashedRootKey(HashRootKey("hashed-key") + ":globex")
	if err != nil {
		t.Fatal(err)
	}
	kr, err := newKeyring([]RootKey{{Key: "plain-key-0123456789", Workspace: "acme"}, hashed})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, header string
		ws           string
		missing, ok  bool
	}{
		{"plaintext key", "Bearer plain-key-0123456789", "acme", false, true},
		{"hashed key", "Bearer hashed-key", "globex", false, true},
		{"the hash itself is no key", "Bearer " + HashRootKey("hashed-key"), "", false, false},
		{"unknown key", "Bearer other", "", false, false},
		{"prefix of a key", "Bearer plain", "", false, false},
		{"no header", "", "", true, false},
		{"basic", "Basic cGxhaW4ta2V5", "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, missing, ok := kr.authenticate(tc.header)
			if ws != tc.ws || missing != tc.missing || ok != tc.ok {
				t.Fatalf("authenticate(%q) = %q, %v, %v", tc.header, ws, missing, ok)
			}
		})
	}
}

func TestKeyringRefuses(t *testing.T) {
	const k = "refused-key-0123456789"
	hashed := RootKey{Workspace: "acme"}
	copy(hashed.SHA256[:], mustHex(t, HashRootKey(k)))
	for _, tc := range []struct {
		name string
		keys []RootKey
	}{
		{"the same key twice", []RootKey{{Key: k, Workspace: "a"}, {Key: k, Workspace: "b"}}},
		{"a key and its hash", []RootKey{{Key: k, Workspace: "a"}, hashed}},
		{"key and hash in one", []RootKey{{Key: k, SHA256: hashed.SHA256, Workspace: "a"}}},
		{"neither key nor hash", []RootKey{{Workspace: "a"}}},
		{"a key shorter than MinRootKeyBytes", []RootKey{{Key: k[:MinRootKeyBytes-1], Workspace: "a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := newKeyring(tc.keys); !errors.Is(err, ErrInvalidRootKey) {
				t.Fatalf("newKeyring = %v, want ErrInvalidRootKey", err)
			}
		})
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// syncBuffer is a bytes.Buffer safe for a logger used by several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAuthFailures sends failed authentications under a fake clock: each is
// counted by reason, at most one line is logged per second with the number of
// failures not logged, and neither the log nor the metrics hold a token.
func TestAuthFailures(t *testing.T) {
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	s := newServerWith(t, Config{RootKeys: []RootKey{{Key: "good-key-0123456789", Workspace: "acme"}}, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	// newServerWith sets its own metrics; count into reg instead.
	m := NewMetrics(reg)
	s.authFail.metrics = m
	now := time.Unix(1_700_000_000, 0)
	s.authFail.now = func() time.Time { return now }
	h := s.Handler()
	body := `{"namespace":"n","identifier":"i","limit":1,"duration":60000}`

	for i := range 10 {
		if r := do(t, h, "POST", "/v2/ratelimit.limit", "Bearer wrong-key-"+fmt.Sprint(i), "application/json", body); r.code != 401 {
			t.Fatalf("wrong key: %d", r.code)
		}
	}
	if r := do(t, h, "POST", "/v2/ratelimit.limit", "", "application/json", body); r.code != 401 {
		t.Fatalf("no key: %d", r.code)
	}
	if got := strings.Count(logs.String(), "authentication failed"); got != 1 {
		t.Fatalf("%d lines within one second, want 1:\n%s", got, logs.String())
	}
	now = now.Add(time.Second)
	if r := do(t, h, "POST", "/v2/ratelimit.limit", "Bearer wrong-key-x", "application/json", body); r.code != 401 {
		t.Fatalf("wrong key: %d", r.code)
	}
	if r := do(t, h, "POST", "/v2/ratelimit.limit", "Bearer good-key-0123456789", "application/json", body); r.code != 200 {
		t.Fatalf("good key: %d %s", r.code, r.raw)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"suppressed":0`) || !strings.Contains(lines[1], `"suppressed":10`) ||
		!strings.Contains(lines[0], `"reason":"unknown_key"`) || !strings.Contains(lines[1], `"endpoint":"ratelimit.limit"`) {
		t.Fatalf("log lines:\n%s", logs.String())
	}
	if got := counterValue(t, m.authFails.WithLabelValues(AuthUnknownKey)); got != 11 {
		t.Errorf("unknown_key failures = %v, want 11", got)
	}
	if got := counterValue(t, m.authFails.WithLabelValues(AuthMissing)); got != 1 {
		t.Errorf("missing failures = %v, want 1", got)
	}
	var metrics bytes.Buffer
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		metrics.WriteString(mf.String())
	}
	for _, out := range []string{logs.String(), metrics.String()} {
		if strings.Contains(out, "wrong-key") || strings.Contains(out, "good-key") {
			t.Fatalf("a presented key was recorded:\n%s", out)
		}
	}
}

func TestAuthFailuresConcurrent(t *testing.T) {
	var logs syncBuffer
	a := newAuthFailures(slog.New(slog.NewTextHandler(&logs, nil)), NewMetrics(prometheus.NewRegistry()))
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			for range 100 {
				a.record(AuthUnknownKey, "e", "r", "id")
			}
		})
	}
	wg.Wait()
	most := int(time.Since(start)/authLogInterval) + 1
	lines, counted := 0, a.suppressed.Load() // counted: failures logged or counted in a line
	for l := range strings.Lines(logs.String()) {
		var n int64
		_, after, ok := strings.Cut(l, "suppressed=")
		if _, err := fmt.Sscan(after, &n); !ok || err != nil {
			t.Fatalf("line without a count: %q", l)
		}
		lines++
		counted += 1 + n
	}
	if lines < 1 || lines > most || counted != 800 {
		t.Fatalf("%d lines (at most %d) accounting for %d failures, want 800", lines, most, counted)
	}
}

// TestDecisionLabelsBounded checks the namespace label bound under
// concurrent decisions: the first MaxNamespaceLabels namespaces get their own
// series, every later one counts under "_other".
func TestDecisionLabelsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	const extra = 50
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range MaxNamespaceLabels + extra {
				m.decision(fmt.Sprintf("ns-%d", i), (i+w)%2 == 0)
				if w == 0 {
					m.reported(fmt.Sprintf("ns-%d", i))
				}
			}
		})
	}
	wg.Wait()
	if got := seriesCount(t, reg, "sluice_ratelimit_decisions_total"); got > 3*(MaxNamespaceLabels+1) {
		t.Fatalf("%d series, want at most %d", got, 3*(MaxNamespaceLabels+1))
	}
	if labels := len(*m.labels.Load()); labels != MaxNamespaceLabels {
		t.Fatalf("%d namespace labels, want %d", labels, MaxNamespaceLabels)
	}
	var total, other float64
	for i := range MaxNamespaceLabels + extra {
		ns := fmt.Sprintf("ns-%d", i)
		if (*m.labels.Load())[ns] == nil {
			continue
		}
		total += counterValue(t, m.decisions.WithLabelValues(ns, "passed")) + counterValue(t, m.decisions.WithLabelValues(ns, "denied"))
	}
	other = counterValue(t, m.decisions.WithLabelValues(otherLabel, "passed")) + counterValue(t, m.decisions.WithLabelValues(otherLabel, "denied"))
	if total != 4*MaxNamespaceLabels || other != 4*extra {
		t.Fatalf("labelled %v, _other %v; want %d and %d", total, other, 4*MaxNamespaceLabels, 4*extra)
	}
	if got := counterValue(t, m.decisions.WithLabelValues(otherLabel, "reported")); got != extra {
		t.Fatalf("_other reported %v, want %d", got, extra)
	}
	if n := testing.AllocsPerRun(100, func() { m.decision("ns-1", true); m.decision("beyond", false); m.reported("ns-1") }); n != 0 {
		t.Fatalf("%v allocations per decision and report of a known and an unlabelled namespace", n)
	}
}

// counterValue returns the value of c.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// seriesCount returns the number of series of the metric name in reg.
func seriesCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}
