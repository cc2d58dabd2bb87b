package httplimit_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readmeService returns the Go program of the README's "In a Go service"
// section: its one go block.
func readmeService(t *testing.T, readme string) string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## In a Go service\n")
	if !ok {
		t.Fatal(`README: no "## In a Go service" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "\n```go\n")
	if !ok {
		t.Fatal("README: the section has no go block")
	}
	block, _, ok = strings.Cut(block, "\n```\n")
	if !ok {
		t.Fatal("README: the go block is not closed")
	}
	return block + "\n"
}

// TestReadmeService builds the README's service exactly as written, in a
// module of its own that requires this checkout (as `go get` would), runs
// it and sends it requests: the limit, the fields and the 429. The only
// change is its address, ":8080", for a free loopback port.
//
// Building the README's file, rather than comparing it with an example,
// also checks what an example could not: its imports, package clause and
// main, as a reader copies them.
func TestReadmeService(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	program := readmeService(t, string(readme))
	addr := freeAddr(t)
	if strings.Count(program, `":8080"`) != 1 {
		t.Fatal(`README: the service does not listen on ":8080" once`)
	}
	program = strings.Replace(program, `":8080"`, `"`+addr+`"`, 1)
	bin := buildProgram(t, root, program)

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	waitListening(t, addr, out)
	checkReadmeService(t, "http://"+addr)
}

// buildProgram builds program as the main package of a module requiring
// the module at root, offline, and returns the executable.
func buildProgram(t *testing.T, root, program string) string {
	t.Helper()
	dir := t.TempDir()
	goSum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	goMod := "module readme\n\ngo 1.26\n\nrequire github.com/sluicehq/sluice v0.0.0\n\nreplace github.com/sluicehq/sluice => " + root + "\n"
	for name, content := range map[string]string{"main.go": program, "go.mod": goMod, "go.sum": string(goSum)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-mod=mod", "-o", "service", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=", "GOPROXY=off", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's service does not build: %v\n%s\n%s", err, out, program)
	}
	return filepath.Join(dir, "service")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitListening(t *testing.T, addr string, out *strings.Builder) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the README's service does not listen on %s:\n%s", addr, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkReadmeService sends the service 101 requests: 100 pass, with the
// fields counting down, and the last is denied.
func checkReadmeService(t *testing.T, url string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	for i := 1; i <= 101; i++ {
		res, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		want, retry := http.StatusOK, false
		if i == 101 {
			want, retry = http.StatusTooManyRequests, true
		}
		policy, field := res.Header.Get("RateLimit-Policy"), res.Header.Get("RateLimit")
		remaining := max(100-i, 0)
		if res.StatusCode != want || policy != `"default";q=100;w=60` ||
			!strings.HasPrefix(field, `"default";r=`+strconv.Itoa(remaining)+";t=") || (res.Header.Get("Retry-After") != "") != retry {
			t.Fatalf("request %d: %d, RateLimit-Policy %q, RateLimit %q, Retry-After %q", i, res.StatusCode, policy, field, res.Header.Get("Retry-After"))
		}
	}
}
