package redis

import (
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/origintest"
)

// TestRegion runs origintest's cases of origin.Region against one Redis and
// a Redis Cluster, each under a region name of its own. A lease lapses by
// Redis's clock, so the test waits out its TTL of 200ms once per run.
func TestRegion(t *testing.T) {
	const ttl = 200 * time.Millisecond
	lapse := func() { time.Sleep(ttl + 50*time.Millisecond) }
	t.Run("one Redis", func(t *testing.T) {
		origintest.Region(t, newOrigin(t, Config{Client: realRedis(t), Region: workspace(t)}), ttl, lapse)
	})
	t.Run("Redis Cluster", func(t *testing.T) {
		origintest.Region(t, newOrigin(t, Config{Client: clusterClient(t), Region: workspace(t)}), ttl, lapse)
	})
}

// TestStoredImports runs origintest's cases of origin.StoredImporter
// against one Redis, whose imports return what they read, and a Redis
// Cluster, whose imports return nothing read (see Origin.ImportStored),
// each under a region name of its own.
func TestStoredImports(t *testing.T) {
	const ttl = 200 * time.Millisecond
	lapse := func() { time.Sleep(ttl + 50*time.Millisecond) }
	t.Run("one Redis", func(t *testing.T) {
		origintest.StoredImports(t, newOrigin(t, Config{Client: realRedis(t), Region: workspace(t)}), true, ttl, lapse)
	})
	t.Run("Redis Cluster", func(t *testing.T) {
		origintest.StoredImports(t, newOrigin(t, Config{Client: clusterClient(t), Region: workspace(t)}), false, ttl, lapse)
	})
}

// TestRegionsApart has two regions share one Redis database: each has a
// lease and a queue of its own.
func TestRegionsApart(t *testing.T) {
	client := realRedis(t)
	a := newOrigin(t, Config{Client: client, Region: workspace(t) + "-a"})
	b := newOrigin(t, Config{Client: client, Region: workspace(t) + "-b"})
	for name, o := range map[string]*Origin{"a": a, "b": b} {
		l, err := o.Lead(t.Context(), origin.LeaseRequest{Holder: name, TTL: time.Minute})
		if err != nil || !l.Held {
			t.Fatalf("region %s: %+v, %v; want its own lease", name, l, err)
		}
	}
	if err := a.Nominate(t.Context(), []origin.Nomination{{Count: 1, Cell: origin.Cell{Key: origin.Key{Duration: time.Second}}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Nominated(t.Context(), 10); err != nil || len(got) != 0 {
		t.Fatalf("b took %v, %v; want none of a's", got, err)
	}
}

// FuzzNomination checks that every nomination decodes to itself, and that
// no input makes the decoder panic.
func FuzzNomination(f *testing.F) {
	f.Add("w", "n:1:", "\xff{}", int64(3), int64(60000), int64(5), int64(100), int64(0))
	f.Add("", "", "", int64(-1), int64(1), int64(0), int64(0), int64(9))
	f.Fuzz(func(t *testing.T, ws, ns, id string, seq, ms, count, limit, usage int64) {
		if ms <= 0 || ms > 1<<40 {
			ms = 1
		}
		n := origin.Nomination{Cell: origin.Cell{Key: origin.Key{Workspace: ws, Namespace: ns, Identifier: id, Duration: time.Duration(ms) * time.Millisecond}, Sequence: seq},
			Count: count, Limit: limit, Usage: usage}
		got, ok := decodeNomination(encodeNomination(n))
		if !ok || got != n {
			t.Fatalf("round trip of %+v: %+v, %v", n, got, ok)
		}
		_, _ = decodeNomination(ws + ":" + id) // arbitrary bytes: never a panic
	})
}

// TestImportRefusesCellsAlone puts one cell Redis cannot import among good
// ones in a single Import, on one server (one script call for all the
// cells) and on a Redis Cluster (one call per cell): it fails alone, as
// ErrBadValue named by its index, and the others are imported.
func TestImportRefusesCellsAlone(t *testing.T) {
	clients := []struct {
		name   string
		client func(t *testing.T) goredis.UniversalClient
	}{
		{"one server", func(t *testing.T) goredis.UniversalClient { return realRedis(t) }},
		{"cluster", func(t *testing.T) goredis.UniversalClient { return clusterClient(t) }},
	}
	spoils := []struct {
		name  string
		spoil func(client goredis.UniversalClient, key string) error
	}{
		{"a string key", func(client goredis.UniversalClient, key string) error {
			return client.Set(t.Context(), key, "not a hash", time.Minute).Err()
		}},
		{"a total that is not an integer", func(client goredis.UniversalClient, key string) error {
			return client.HSet(t.Context(), key, totalField, "x").Err()
		}},
		{"a region's entry that is not an integer", func(client goredis.UniversalClient, key string) error {
			return client.HSet(t.Context(), key, "g:eu", "1.5.2").Err()
		}},
	}
	for _, c := range clients {
		for _, sp := range spoils {
			t.Run(c.name+"/"+sp.name, func(t *testing.T) {
				client := c.client(t)
				o := newOrigin(t, Config{Client: client})
				ws := workspace(t)
				cell := func(id string) origin.Cell {
					return origin.Cell{Key: origin.Key{Workspace: ws, Namespace: "n", Identifier: id, Duration: time.Minute}, Sequence: 3}
				}
				imports := []origin.Import{
					{Cell: cell("good-1"), Counts: []origin.RegionCount{{Region: "eu", Count: 4}}},
					{Cell: cell("bad"), Counts: []origin.RegionCount{{Region: "eu", Count: 5}}},
					{Cell: cell("good-2"), Counts: []origin.RegionCount{{Region: "eu", Count: 6}}},
				}
				bad := CellKey(imports[1].Cell)
				if err := sp.spoil(client, bad); err != nil {
					t.Fatal(err)
				}
				before, _ := client.Dump(t.Context(), bad).Result()
				err := o.Import(t.Context(), imports)
				if !errors.Is(err, ErrBadValue) || !strings.Contains(err.Error(), "import 1") {
					t.Fatalf("Import: %v, want import 1 refused with ErrBadValue", err)
				}
				for _, i := range []int{0, 2} {
					counts, err := o.Load(t.Context(), imports[i].Cell.Key, 3)
					if want := imports[i].Counts[0].Count; err != nil || counts.Imported.Current != want {
						t.Fatalf("cell %d: %+v, %v; want %d imported", i, counts, err, want)
					}
				}
				if after, _ := client.Dump(t.Context(), bad).Result(); after != before {
					t.Fatal("the refused cell changed")
				}
			})
		}
	}
}
