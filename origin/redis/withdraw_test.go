package redis

import (
	"testing"

	"github.com/sluicehq/sluice/origin/origintest"
)

// TestReservations runs the reservation and withdrawal cases of
// origintest against one Redis and a Redis Cluster.
func TestReservations(t *testing.T) {
	t.Run("one Redis", func(t *testing.T) {
		origintest.Reservations(t, newOrigin(t, Config{Client: realRedis(t)}))
	})
	t.Run("Redis Cluster", func(t *testing.T) {
		origintest.Reservations(t, newOrigin(t, Config{Client: clusterClient(t)}))
	})
}
