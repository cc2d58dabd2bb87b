package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
	"github.com/sluicehq/sluice/origin/origintest"
)

func TestLoadManyConformance(t *testing.T) {
	t.Run("one Redis", func(t *testing.T) {
		origintest.LoadMany(t, newOrigin(t, Config{Client: realRedis(t)}))
	})
	t.Run("Redis Cluster", func(t *testing.T) {
		origintest.LoadMany(t, newOrigin(t, Config{Client: clusterClient(t)}))
	})
}

// TestLoadManyIsOneCall reads several counters with one LoadMany: one
// call through the breaker, of two cells (keys) a counter, on a client of
// one server.
func TestLoadManyIsOneCall(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	o := newOrigin(t, Config{Client: realRedis(t), Observer: rec})
	cells := make([]origin.Cell, 3)
	for i := range cells {
		cells[i] = origin.Cell{Key: origin.Key{Workspace: workspace(t), Namespace: "n", Identifier: string(rune('a' + i)), Duration: time.Second}, Sequence: 9}
	}
	if _, err := o.LoadMany(context.Background(), cells); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) != 1 || rec.calls[0].Op != OpLoad || rec.calls[0].Cells != 6 || rec.calls[0].Outcome != OutcomeOK {
		t.Fatalf("calls %+v, want one load of 6 cells", rec.calls)
	}
}

// TestLoadManyFailures checks what fails alone and what fails the call.
func TestLoadManyFailures(t *testing.T) {
	t.Parallel()
	client := realRedis(t)
	ctx := context.Background()
	key := func(id string) origin.Key {
		return origin.Key{Workspace: workspace(t), Namespace: "n", Identifier: id, Duration: time.Minute}
	}
	bad := origin.Cell{Key: key("bad"), Sequence: 5}
	if err := client.Set(ctx, CellKey(bad), "not a number", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	good := origin.Cell{Key: key("good"), Sequence: 5}
	closed := newOrigin(t, Config{Client: client})
	_ = closed.Close()
	tests := []struct {
		name  string
		o     *Origin
		cells []origin.Cell
		check func(t *testing.T, counts []origin.Counts, err error)
	}{
		{"a cell that holds a string fails alone", newOrigin(t, Config{Client: client}), []origin.Cell{good, bad, good},
			func(t *testing.T, counts []origin.Counts, err error) {
				var cells *origin.CellErrors
				if !errors.As(err, &cells) || len(cells.Failed) != 1 || !errors.Is(cells.Failed[1], ErrBadValue) ||
					errors.Is(err, origin.ErrUnavailable) || len(counts) != 3 {
					t.Fatalf("LoadMany = %v, %v; want cell 1 alone failed with ErrBadValue", counts, err)
				}
			}},
		{"an invalid cell fails the call before anything is sent", newOrigin(t, Config{Client: client}),
			[]origin.Cell{good, {Key: origin.Key{Namespace: "n", Identifier: "i"}}},
			func(t *testing.T, counts []origin.Counts, err error) {
				if !errors.Is(err, ErrInvalidCell) || counts != nil {
					t.Fatalf("LoadMany = %v, %v; want ErrInvalidCell", counts, err)
				}
			}},
		{"a closed origin fails the call", closed, []origin.Cell{good},
			func(t *testing.T, counts []origin.Counts, err error) {
				if !errors.Is(err, ErrClosed) || !errors.Is(err, origin.ErrUnavailable) || counts != nil {
					t.Fatalf("LoadMany = %v, %v; want ErrClosed", counts, err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counts, err := tt.o.LoadMany(ctx, tt.cells)
			tt.check(t, counts, err)
		})
	}
}
