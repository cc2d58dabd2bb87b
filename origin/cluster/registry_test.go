package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
)

// TestRegistry checks that nodes registered in one region find each other,
// not another region's, and that an entry expires when its node stops
// refreshing it, or at once when it closes.
func TestRegistry(t *testing.T) {
	mr := miniredis.RunT(t)
	client := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	now := time.Now()
	reg := func(region, name, addr string) *Registry {
		r, err := NewRegistry(ctx, client, region, name, addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	a := reg("eu", "a", "10.0.0.1:7946")
	b := reg("eu", "b", "10.0.0.2:7946")
	reg("us", "c", "10.0.1.1:7946")
	got, err := a.Discover(ctx)
	slices.Sort(got)
	if want := []string{"10.0.0.1:7946", "10.0.0.2:7946"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("eu: %v %v, want %v", got, err, want)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Discover(ctx); !slices.Equal(got, []string{"10.0.0.1:7946"}) {
		t.Errorf("after b closed: %v", got)
	}
	a.clock = func() time.Time { return now.Add(RegistryTTL + time.Second) } // a stopped refreshing
	if got, _ := a.Discover(ctx); len(got) != 0 {
		t.Errorf("after the TTL: %v", got)
	}
}
