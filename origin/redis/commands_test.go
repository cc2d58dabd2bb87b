package redis

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/origin"
)

// TestCommandsPerCall pins what each call costs Redis, as INFO commandstats
// counts it (the commands a script runs included), on a server of its own
// so that no other test's commands mix in. The simulator's cost model
// (sim/costs.go) counts the same figures.
func TestCommandsPerCall(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	client := newTestClient(t, srv.Addr)
	f := newCommandsFixture(newOrigin(t, Config{Client: client}))
	if _, err := f.o.Lead(context.Background(), origin.LeaseRequest{Holder: commandsHolder, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// Load the scripts first: a NOSCRIPT answer would add an EVAL.
	for _, script := range []*goredis.Script{raiseScript, importScript, storeScript, decideScript} {
		if err := script.Load(context.Background(), client).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range f.cases() {
		before := testenv.CommandCalls(t, client)
		if err := tt.call(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got := testenv.CommandCalls(t, client)
		for name := range got {
			got[name] -= before[name]
			if got[name] == 0 || connectionCommand(name) {
				delete(got, name)
			}
		}
		if !maps.Equal(got, tt.want) {
			t.Errorf("%s: commands %v, want %v", tt.name, got, tt.want)
		}
	}
}

// commandsHolder is the lease holder of TestCommandsPerCall's leader.
const commandsHolder = "leader"

// commandsFixture holds the origin and the cells TestCommandsPerCall calls.
type commandsFixture struct {
	o      *Origin
	deltas []origin.Delta // cells 0 to 9 of sequence 7, raised by raise
	check  origin.Check   // an origin decision on cell 0
}

// A commandsCase is a call and the commands Redis counts for it.
type commandsCase struct {
	name string
	call func() error
	want map[string]int64
}

func newCommandsFixture(o *Origin) *commandsFixture {
	f := &commandsFixture{o: o, deltas: make([]origin.Delta, 10)}
	for i := range f.deltas {
		f.deltas[i] = add(origin.Cell{Key: commandsKey(i), Sequence: 7}, 2)
	}
	f.check = origin.Check{Key: commandsKey(0), Seq: 7, Elapsed: 1000, Writer: f.deltas[0].Writer, Sent: 2,
		Asks: []origin.Ask{{Limit: 100, Cost: 1}}}
	return f
}

// commandsKey returns the key of cell i.
func commandsKey(i int) origin.Key {
	return origin.Key{Workspace: "w", Namespace: "n", Identifier: strconv.Itoa(i), Duration: time.Minute}
}

// cases returns the calls in the order they run: each case's counts
// depend on what the cases before it wrote.
func (f *commandsFixture) cases() []commandsCase {
	ctx := context.Background()
	return []commandsCase{
		{"apply, 10 new cells", f.raise(0), map[string]int64{"evalsha": 1, "hmget": 10, "hset": 10, "pexpire": 10}},
		{"apply, 10 cells raised", f.raise(3), map[string]int64{"evalsha": 1, "hmget": 10, "hset": 10}},
		{"apply, 10 cells sent again", f.raise(0), map[string]int64{"evalsha": 1, "hmget": 10}},
		{"apply, 300 new cells: two calls", f.applyNew(300, 8), map[string]int64{"evalsha": 2, "hmget": 300, "hset": 300, "pexpire": 300}},
		{"import, 10 new cells", f.imp(10, 9, 1), map[string]int64{"evalsha": 1, "hmget": 10, "hset": 10, "pexpire": 10}},
		{"import, 10 cells raised", f.imp(10, 9, 2), map[string]int64{"evalsha": 1, "hmget": 10, "hset": 10}},
		{"import, 10 cells again", f.imp(10, 9, 2), map[string]int64{"evalsha": 1, "hmget": 10}},
		{"import, 300 cells: two calls", f.imp(300, 10, 1), map[string]int64{"evalsha": 2, "hmget": 300, "hset": 300, "pexpire": 300}},
		{"leader's import, 10 new cells read", f.impAs(10, 11, 1, false), map[string]int64{"evalsha": 1, "get": 1, "hmget": 10, "hset": 10, "pexpire": 10}},
		{"leader's import, 10 known cells", f.impAs(10, 11, 2, true), map[string]int64{"evalsha": 1, "get": 1, "hset": 10}},
		{"leader's import, 10 known new cells", f.impAs(10, 12, 2, true), map[string]int64{"evalsha": 1, "get": 1, "hset": 10, "pexpire": 10}},
		{"load", func() error { _, err := f.o.Load(ctx, commandsKey(0), 7); return err }, map[string]int64{"hmget": 2}},
		{"decide, admitted", func() error {
			f.check.Sent = f.deltas[0].Sent
			_, err := f.o.Decide(ctx, f.check)
			return err
		}, map[string]int64{"evalsha": 1, "hmget": 2, "hset": 1}},
		{"decide, nothing written", func() error {
			f.check.Asks[0].Limit = 0
			f.check.Sent = f.deltas[0].Sent + 1 // the admission above raised the share by 1
			_, err := f.o.Decide(ctx, f.check)
			return err
		}, map[string]int64{"evalsha": 1, "hmget": 2}},
	}
}

// raise returns a call that raises the fixture's 10 cells by by and
// applies them.
func (f *commandsFixture) raise(by int64) func() error {
	return func() error {
		for i := range f.deltas {
			f.deltas[i].Sent += by
		}
		_, err := f.o.Apply(context.Background(), f.deltas)
		return err
	}
}

// applyNew returns a call that applies n new cells of sequence seq.
func (f *commandsFixture) applyNew(n int, seq int64) func() error {
	return func() error {
		many := make([]origin.Delta, n)
		for i := range many {
			many[i] = add(origin.Cell{Key: commandsKey(i), Sequence: seq}, 1)
		}
		_, err := f.o.Apply(context.Background(), many)
		return err
	}
}

// commandsImports returns n imports of sequence seq: count from eu, 1 from us.
func commandsImports(n int, seq, count int64) []origin.Import {
	imps := make([]origin.Import, n)
	for i := range imps {
		imps[i] = origin.Import{Cell: origin.Cell{Key: commandsKey(i), Sequence: seq},
			Counts: []origin.RegionCount{{Region: "eu", Count: count}, {Region: "us", Count: 1}}}
	}
	return imps
}

// imp returns a call that imports n cells (see commandsImports).
func (f *commandsFixture) imp(n int, seq, count int64) func() error {
	return func() error { return f.o.Import(context.Background(), commandsImports(n, seq, count)) }
}

// impAs returns a call that imports n cells as the leader, marked known or
// not.
func (f *commandsFixture) impAs(n int, seq, count int64, known bool) func() error {
	return func() error {
		imps := commandsImports(n, seq, count)
		for i := range imps {
			imps[i].Known, imps[i].Imported = known, count+1
		}
		_, err := f.o.ImportStored(context.Background(), commandsHolder, imps)
		return err
	}
}

// connectionCommand reports the commands of the test itself and of a new
// connection's handshake, which no call of the origin sends.
func connectionCommand(name string) bool {
	return name == "info" || name == "hello" || name == "ping" || strings.HasPrefix(name, "client")
}

// TestApplyRefusesCellsAlone puts one cell Redis cannot raise among good
// ones in a single Apply, on one server (one script call for all the cells)
// and on a Redis Cluster (one call per cell): it fails alone, as
// ErrBadValue, and the others are raised once.
func TestApplyRefusesCellsAlone(t *testing.T) {
	t.Parallel()
	clients := []struct {
		name   string
		client func(t *testing.T) goredis.UniversalClient
	}{
		{"one server", func(t *testing.T) goredis.UniversalClient { return realRedis(t) }},
		{"cluster", func(t *testing.T) goredis.UniversalClient { return clusterClient(t) }},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			refusesCellsAlone(t, c.client(t))
		})
	}
}

func refusesCellsAlone(t *testing.T, client goredis.UniversalClient) {
	o := newOrigin(t, Config{Client: client})
	ctx := context.Background()
	tests := []struct {
		name  string
		spoil func(key string, d origin.Delta) error
		sent  int64
	}{
		{"a string key", func(key string, _ origin.Delta) error {
			return client.Set(ctx, key, "not a hash", time.Minute).Err()
		}, 1},
		{"a total that is not an integer", func(key string, _ origin.Delta) error {
			return client.HSet(ctx, key, totalField, "x").Err()
		}, 1},
		{"a share that is not an integer", func(key string, d origin.Delta) error {
			return client.HSet(ctx, key, writerField(d.Writer), "1.5.2").Err()
		}, 1},
		{"a total past 2^53-1", func(key string, _ origin.Delta) error {
			return client.HSet(ctx, key, totalField, maxExact-1).Err()
		}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := workspace(t)
			cell := func(id string) origin.Cell {
				return origin.Cell{Key: origin.Key{Workspace: ws, Namespace: "n", Identifier: id, Duration: time.Minute}, Sequence: 3}
			}
			deltas := []origin.Delta{add(cell("good-1"), 4), add(cell("bad"), tt.sent), add(cell("good-2"), 6)}
			bad := CellKey(deltas[1].Cell)
			if err := tt.spoil(bad, deltas[1]); err != nil {
				t.Fatal(err)
			}
			before, _ := client.Dump(ctx, bad).Result()
			totals, err := o.Apply(ctx, deltas)
			var cells *origin.CellErrors
			if !errors.As(err, &cells) || len(cells.Failed) != 1 || !errors.Is(cells.Failed[1], ErrBadValue) {
				t.Fatalf("Apply: %v, want cell 1 alone refused with ErrBadValue", err)
			}
			if errors.Is(err, origin.ErrUnavailable) {
				t.Fatalf("Apply: %v, a refused cell is not an outage", err)
			}
			if totals[0].Count != 4 || totals[2].Count != 6 {
				t.Fatalf("totals %v, want 4 and 6 for the good cells", totals)
			}
			if after, _ := client.Dump(ctx, bad).Result(); after != before {
				t.Fatal("the refused cell changed")
			}
		})
	}
}
