package client

import (
	"testing"
	"time"
)

// serverFirstRequest is how long a Sluice server keeps a connection that
// has started no request (docs/security.md, cmd/sluice's
// TestFirstRequestTimeout).
const serverFirstRequest = 10 * time.Second

// TestIdleConnectionsCloseBeforeTheServerDoes: the client's own transport
// closes an idle connection at least a second before the server would close
// it unused, so that a Limit is never sent on a connection the server is
// closing (a reset the client may not retry).
func TestIdleConnectionsCloseBeforeTheServerDoes(t *testing.T) {
	idle := newTransport(nil).IdleConnTimeout
	if idle <= 0 || idle > serverFirstRequest-time.Second {
		t.Fatalf("the transport keeps idle connections %v; the server closes unused ones at %v", idle, serverFirstRequest)
	}
}
