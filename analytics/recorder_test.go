package analytics

import (
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the start of the tests' virtual time, on a minute boundary.
var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func newRecorder(t testing.TB, cfg Config) *Recorder {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustReport(t testing.TB, r *Recorder, ws, ns string, iv Interval, now time.Time) Report {
	t.Helper()
	rep, err := r.Report(ws, ns, iv, now)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestZipfTopTen records an hour of Zipf traffic (s=1.1 over 10,000
// identifiers), denying an identifier's requests beyond 20 a minute, and
// compares both top lists with exact counts: the true top 10 are the top
// 10 listed, and every count is within its error of the truth, the error
// within N/SketchSize.
func TestZipfTopTen(t *testing.T) {
	r := newRecorder(t, Config{})
	const n = 360_000 // 100 a second for an hour
	requests, denials := limitedZipf(n, func(i int, id string, passed bool, now time.Time) {
		r.Record("ws", "api", id, passed, now)
		if i%1000 == 0 {
			r.Advance(now)
		}
	})
	end := t0.Add(time.Hour - time.Second)
	rep := mustReport(t, r, "ws", "api", Hour, end)
	if rep.Requests != n {
		t.Fatalf("window total %d, want %d", rep.Requests, n)
	}
	checkTop(t, "requests", rep.TopRequests, requests, rep.Requests)
	checkTop(t, "denied", rep.TopDenied, denials, rep.Denials)
}

// limitedZipf sends n requests of Zipf traffic (zipfStream) to each, 100
// a second from t0, an identifier's requests beyond 20 a minute denied,
// and returns the exact requests and denials of every identifier.
func limitedZipf(n int, each func(i int, id string, passed bool, now time.Time)) (requests, denials map[string]uint64) {
	requests, denials = map[string]uint64{}, map[string]uint64{}
	perMinute := map[string]int{}
	for i, id := range zipfStream(n) {
		if i%6000 == 0 {
			clear(perMinute)
		}
		perMinute[id]++
		passed := perMinute[id] <= 20
		requests[id]++
		if !passed {
			denials[id]++
		}
		each(i, id, passed, t0.Add(time.Duration(i)*10*time.Millisecond))
	}
	return requests, denials
}

// checkTop compares a top list with exact counts over a window of n.
func checkTop(t *testing.T, name string, got []Heavy, exact map[string]uint64, n uint64) {
	t.Helper()
	ids := make([]string, 0, len(exact))
	for id := range exact {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return int(exact[b]) - int(exact[a]) })
	want := ids[:TopN]
	if len(got) != TopN {
		t.Fatalf("%s: %d listed, want %d", name, len(got), TopN)
	}
	for i, h := range got {
		f := exact[h.Identifier]
		if h.Count < f || h.Count-h.Error > f || h.Error*SketchSize > n {
			t.Errorf("%s #%d %s: true %d, count %d, error %d, N/k %d", name, i+1, h.Identifier, f, h.Count, h.Error, n/SketchSize)
		}
		if !slices.Contains(want, h.Identifier) {
			t.Errorf("%s #%d %s (true %d) is not in the true top 10 %v", name, i+1, h.Identifier, f, want)
		}
	}
	t.Logf("%s: N %d, bound N/k %d, #1 %s %d±%d (true %d), #10 %s %d±%d (true %d)", name, n, n/SketchSize,
		got[0].Identifier, got[0].Count, got[0].Error, exact[got[0].Identifier],
		got[9].Identifier, got[9].Count, got[9].Error, exact[got[9].Identifier])
}

func TestSeries(t *testing.T) {
	r := newRecorder(t, Config{})
	// Second 0: 2 passed, 1 denied; second 59: 1 passed; minute 2: 1 denied.
	r.Record("ws", "api", "a", true, t0)
	r.Record("ws", "api", "a", true, t0.Add(500*time.Millisecond))
	r.Record("ws", "api", "b", false, t0.Add(999*time.Millisecond))
	r.Record("ws", "api", "a", true, t0.Add(59*time.Second))
	r.Record("ws", "api", "c", false, t0.Add(2*time.Minute+time.Second))
	now := t0.Add(2*time.Minute + 30*time.Second)
	for _, tc := range []struct {
		iv     Interval
		points int
		step   time.Duration
		want   map[time.Time][2]uint64
	}{
		{Minute, 60, time.Second, map[time.Time][2]uint64{t0.Add(2*time.Minute + time.Second): {0, 1}}},
		{Hour, 3600, time.Second, map[time.Time][2]uint64{
			t0: {2, 1}, t0.Add(59 * time.Second): {1, 0}, t0.Add(2*time.Minute + time.Second): {0, 1},
		}},
		{Day, 1440, time.Minute, map[time.Time][2]uint64{t0: {3, 1}, t0.Add(2 * time.Minute): {0, 1}}},
	} {
		t.Run(string(tc.iv), func(t *testing.T) {
			rep := mustReport(t, r, "ws", "api", tc.iv, now)
			if !rep.Tracked || len(rep.Series) != tc.points || rep.Step != tc.step {
				t.Fatalf("tracked %v, %d points of %v; want %d of %v", rep.Tracked, len(rep.Series), rep.Step, tc.points, tc.step)
			}
			if last := rep.Series[len(rep.Series)-1].Time; !last.Equal(now.Truncate(tc.step)) {
				t.Fatalf("last point at %v, want %v", last, now.Truncate(tc.step))
			}
			for _, p := range rep.Series {
				w := tc.want[p.Time]
				if p.Passed != w[0] || p.Denied != w[1] {
					t.Errorf("%v: %d passed, %d denied; want %v", p.Time, p.Passed, p.Denied, w)
				}
			}
		})
	}
}

// TestWindows checks what each top list covers: a minute-window list
// forgets a decision after 60 to 70 s, an hour-window list after 60 to 70
// min, and a series after its ring's length.
func TestWindows(t *testing.T) {
	r := newRecorder(t, Config{})
	r.Record("ws", "api", "old", false, t0)
	for _, tc := range []struct {
		after      time.Duration
		iv         Interval
		wantListed bool
	}{
		{59 * time.Second, Minute, true},
		{60 * time.Second, Minute, true},
		{70 * time.Second, Minute, false},
		{59 * time.Minute, Hour, true},
		{70 * time.Minute, Hour, false},
		{70 * time.Minute, Day, false},
	} {
		rep := mustReport(t, r, "ws", "api", tc.iv, t0.Add(tc.after))
		if listed := len(rep.TopDenied) == 1; listed != tc.wantListed {
			t.Errorf("%v after %v: listed %v, want %v", tc.iv, tc.after, listed, tc.wantListed)
		}
	}
	// A decision older than the per-second ring is late; one at the edge
	// is not.
	r.Record("ws", "api", "x", true, t0.Add(2*time.Hour))
	r.Record("ws", "api", "x", true, t0.Add(time.Hour+time.Second))
	r.Record("ws", "api", "x", true, t0.Add(time.Hour))
	if st := r.Stats(); st.Late != 1 {
		t.Fatalf("late %d, want 1", st.Late)
	}
	// The slots of the first hour were reused: only the two decisions of
	// the last hour are left.
	var passed, denied uint64
	for _, p := range mustReport(t, r, "ws", "api", Hour, t0.Add(2*time.Hour)).Series {
		passed, denied = passed+p.Passed, denied+p.Denied
	}
	if passed != 2 || denied != 0 {
		t.Fatalf("last hour: %d passed, %d denied; want 2 and 0", passed, denied)
	}
}

// TestCap checks that namespaces beyond MaxNamespaces go to the aggregate,
// never into a series of their own, and that an idle namespace frees its
// slot after IdleAfter.
func TestCap(t *testing.T) {
	r := newRecorder(t, Config{MaxNamespaces: 3})
	for i := range 10 {
		r.Record("ws", "ns"+strconv.Itoa(i), "id", true, t0)
	}
	st := r.Stats()
	if st.Namespaces != 3 || st.Aggregated != 7 {
		t.Fatalf("stats %+v, want 3 namespaces and 7 aggregated", st)
	}
	if rep := mustReport(t, r, "ws", "ns9", Hour, t0); rep.Tracked {
		t.Fatal("ns9, beyond the cap, has a series of its own")
	}
	other, err := r.Other(Hour, t0)
	if err != nil || !other.Tracked || other.Series[len(other.Series)-1].Passed != 7 {
		t.Fatalf("aggregate: %v, %+v", err, other.Series[len(other.Series)-1])
	}
	r.Record("ws", "ns0", "id", true, t0.Add(12*time.Hour))
	r.Advance(t0.Add(IdleAfter + time.Hour))
	if got := r.Namespaces(); len(got) != 1 || got[0] != (Key{"ws", "ns0"}) {
		t.Fatalf("after a day, tracked %v, want only ns0", got)
	}
	if o, _ := r.Other(Hour, t0); o.Tracked {
		t.Fatal("the idle aggregate is kept")
	}
	r.Record("ws", "new", "id", true, t0.Add(IdleAfter+time.Hour))
	if st := r.Stats(); st.Namespaces != 2 {
		t.Fatalf("a new namespace did not get a freed slot: %+v", st)
	}
}

func TestInvalid(t *testing.T) {
	for _, cfg := range []Config{{MaxNamespaces: -1}, {QueueSize: -2}, {QueueSize: 3}} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
	r := newRecorder(t, Config{})
	if _, err := r.Report("ws", "api", "2h", t0); !errors.Is(err, ErrInvalidInterval) {
		t.Fatalf("interval 2h: %v", err)
	}
	rep := mustReport(t, r, "ws", "unknown", Day, t0)
	if rep.Tracked || len(rep.Series) != MinuteSlots || rep.TopRequests == nil || len(rep.TopRequests) != 0 {
		t.Fatalf("unknown namespace: %+v", rep.Tracked)
	}
}

// TestConcurrentRecord records from several goroutines through a tiny
// queue (so that producers find it full) while another advances: every
// decision is either applied once or counted as dropped.
func TestConcurrentRecord(t *testing.T) {
	r := newRecorder(t, Config{QueueSize: 4})
	const goroutines, each = 4, 2000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				r.Record("ws", "api", "id"+strconv.Itoa(g), i%2 == 0, t0)
			}
		})
	}
	stop := make(chan struct{})
	advanced := make(chan struct{})
	go func() {
		defer close(advanced)
		for {
			select {
			case <-stop:
				return
			default:
				r.Advance(t0)
				runtime.Gosched()
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-advanced
	p := mustReport(t, r, "ws", "api", Minute, t0).Series[59]
	dropped := r.Stats().Dropped
	if p.Passed+p.Denied+dropped != goroutines*each {
		t.Fatalf("%d passed, %d denied, %d dropped; want %d in all", p.Passed, p.Denied, dropped, goroutines*each)
	}
	t.Logf("%d of %d decisions found the queue full", dropped, goroutines*each)
}

// TestBytesPerNamespace checks BytesPerNamespace against the sizes of a
// namespace's parts, and against the heap a namespace with every sketch
// allocated takes.
func TestBytesPerNamespace(t *testing.T) {
	fixed := unsafe.Sizeof(space{}) + SecondSlots*unsafe.Sizeof(counts{}) + MinuteSlots*unsafe.Sizeof(counts{}) +
		2*topBuckets*2*unsafe.Sizeof(sketch{})
	if fixed > BytesPerNamespace {
		t.Fatalf("a namespace's parts take %d bytes, above BytesPerNamespace %d", fixed, BytesPerNamespace)
	}
	const n = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := newRecorder(t, Config{QueueSize: 1 << 16})
	ids := make([]string, SketchSize)
	for i := range ids {
		ids[i] = "id" + strconv.Itoa(i) // the identifiers' bytes are not counted
	}
	for ns := range n {
		for b := range topBuckets {
			now := t0.Add(time.Duration(b) * hourWidth * time.Second)
			for _, id := range ids {
				r.Record("ws", "ns"+strconv.Itoa(ns), id, false, now)
			}
			r.Record("ws", "ns"+strconv.Itoa(ns), "x", false, now.Add(-minuteWidth*time.Second*time.Duration(b)))
		}
		r.Advance(t0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (after.HeapAlloc - before.HeapAlloc - uint64(unsafe.Sizeof(cell{}))<<16) / n
	t.Logf("parts %d bytes, heap %d bytes per namespace (BytesPerNamespace %d)", fixed, per, BytesPerNamespace)
	if per > BytesPerNamespace {
		t.Fatalf("a namespace takes %d bytes of heap, above BytesPerNamespace %d", per, BytesPerNamespace)
	}
	runtime.KeepAlive(r)
}

// TestRecordNeverWaits records past a full queue that nothing applies: each
// Record must return without applying the queue itself and without
// waiting for the recorder's lock, whoever holds it, and count the
// decisions it left out.
func TestRecordNeverWaits(t *testing.T) {
	for _, tc := range []struct {
		name string
		held bool // a reader holds the recorder's lock meanwhile
	}{
		{"lock free", false},
		{"lock held by a reader", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const size, extra = 64, 100
			r := newRecorder(t, Config{QueueSize: size})
			if tc.held {
				r.mu.Lock()
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range size + extra {
					r.Record("ws", "api", "id", true, t0)
				}
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Error("Record waited 5 s for the recorder's lock")
			}
			if tc.held {
				r.mu.Unlock()
			}
			<-done
			if r.q.head != 0 {
				t.Errorf("Record applied %d queued decisions itself", r.q.head)
			}
			if st := r.Stats(); st.Dropped != extra {
				t.Errorf("%d decisions counted as dropped, want %d", st.Dropped, extra)
			}
			if p := mustReport(t, r, "ws", "api", Minute, t0).Series[59]; p.Passed != size {
				t.Errorf("%d decisions applied, want the queue's %d", p.Passed, size)
			}
		})
	}
}

// TestLongIdentifiers records identifiers around MaxIdentifierBytes: one
// within it is kept whole; a longer one is kept in at most
// MaxIdentifierBytes, cut at a character boundary and marked with "…" and
// a hash of the whole, so that two long ones sharing their first bytes
// stay apart.
func TestLongIdentifiers(t *testing.T) {
	long := strings.Repeat("é", 4096) // 8 KiB of 2-byte characters
	for _, tc := range []struct {
		name, id string
		whole    bool
	}{
		{"at the cap", strings.Repeat("a", MaxIdentifierBytes), true},
		{"one byte over", strings.Repeat("b", MaxIdentifierBytes+1), false},
		{"8 KiB", long + "x", false},
		{"8 KiB, another end", long + "y", false},
		{"3-byte characters", strings.Repeat("€", 200), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder(t, Config{})
			r.Record("ws", "api", tc.id, true, t0)
			r.Record("ws", "api", long+"z", true, t0) // another long one, to stay apart from
			top := mustReport(t, r, "ws", "api", Minute, t0).TopRequests
			if len(top) != 2 {
				t.Fatalf("%d identifiers listed, want 2", len(top))
			}
			got := top[0].Identifier
			if !strings.HasPrefix(tc.id, got[:min(len(got), 8)]) {
				got = top[1].Identifier
			}
			switch {
			case len(got) > MaxIdentifierBytes || !utf8.ValidString(got):
				t.Fatalf("kept %d bytes (valid UTF-8: %v), want at most %d", len(got), utf8.ValidString(got), MaxIdentifierBytes)
			case tc.whole && got != tc.id:
				t.Fatalf("kept %q, want it whole", got)
			case !tc.whole && (!strings.Contains(got, "…") || !strings.HasPrefix(tc.id, got[:strings.LastIndex(got, "…")])):
				t.Fatalf("kept %q, want a prefix of it marked with …", got)
			}
		})
	}
}
