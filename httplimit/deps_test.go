package httplimit_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoGRPC checks that a program using httplimit (or the client)
// does not link gRPC: the interceptors live in grpclimit.
func TestLinksNoGRPC(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".", "../client").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if strings.Contains(string(out), "google.golang.org/grpc") {
		t.Error("httplimit or client links google.golang.org/grpc")
	}
}
