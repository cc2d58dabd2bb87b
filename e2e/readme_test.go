package e2e

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadme runs the README: the quick start's server (the command as
// written, on a free port through its environment variables) and the curl
// against it, the library snippet as a program, and builds every other Go
// block. A block that cannot run here is marked `<!-- not run: why -->`
// in the README; any other block fails the test until it is run here. The
// flags of the inline `sluice serve` commands must exist.
func TestReadme(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := docBlocks(string(readme))
	if err != nil {
		t.Fatalf("README: %v", err)
	}
	var addr string
	for _, b := range blocks {
		first, _, _ := strings.Cut(b.code, "\n")
		switch {
		case b.notRun != "":
			t.Logf("not run: %q: %s", first, b.notRun)
		case b.lang == "sh" && strings.TrimSpace(b.code) == "go run ./cmd/sluice serve":
			addr = runReadmeServer(t, root, b.code)
		case b.lang == "sh" && strings.HasPrefix(first, "curl "):
			if addr == "" {
				t.Fatal("README: the curl comes before the server it calls")
			}
			runReadmeCurl(t, strings.ReplaceAll(b.code, "127.0.0.1:7070", addr))
		case b.lang == "go" && strings.HasPrefix(first, "package "):
			buildGoSnippet(t, root, b.code)
		case b.lang == "go":
			runReadmeGo(t, root, b.code)
		default:
			t.Errorf("README block %q (%s, line %d) is neither run by TestReadme nor marked %q", first, b.lang, b.line, notRunMarker+" why -->")
		}
	}
	checkReadmeFlags(t, string(readme))
}

// runReadmeServer runs the quick start's command in the repository, on a free
// port and a temporary data folder given through the environment, and
// returns its address once it answers.
func runReadmeServer(t *testing.T, root, command string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command("sh", "-c", command)
	cmd.Dir = root
	cmd.Env = append(cleanEnv(), "SLUICE_HTTP_ADDR="+addr, "SLUICE_ADMIN_ADDR=127.0.0.1:0", "SLUICE_DATA_DIR="+t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // go run starts the server as a child
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(3 * time.Minute) // go run compiles first
	for {
		resp, err := http.Get("http://" + addr + "/v2/liveness")
		if err == nil {
			resp.Body.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q did not start answering on %s:\n%s", command, addr, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runReadmeCurl runs the quick start's curl and checks it got a decision.
func runReadmeCurl(t *testing.T, command string) {
	t.Helper()
	out, err := exec.Command("sh", "-c", command).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(`"success":true`)) {
		t.Fatalf("%s\n%v: %s", command, err, out)
	}
}

// runReadmeGo runs the library snippet as the body of a function in a
// module that uses this repository.
func runReadmeGo(t *testing.T, root, snippet string) {
	t.Helper()
	program := snippetProgram(snippet)
	dir := goModule(t, root, program)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "-mod=mod", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go snippet does not run: %v\n%s\n%s", err, out, program)
	}
}

// snippetImports are the packages a snippet may use, by the prefix that
// shows it does.
var snippetImports = map[string]string{
	"errors.":    `"errors"`,
	"time.":      `"time"`,
	"fmt.":       `"fmt"`,
	"http.":      `"net/http"`,
	"sluice.":    `"github.com/sluicehq/sluice"`,
	"client.":    `"github.com/sluicehq/sluice/client"`,
	"httplimit.": `"github.com/sluicehq/sluice/httplimit"`,
}

// snippetProgram makes a program of a snippet that is the body of a
// function returning an error: run(ctx), called by main.
func snippetProgram(snippet string) string {
	imports := []string{`"context"`, `"log"`}
	for prefix, path := range snippetImports {
		if regexp.MustCompile(`(^|[^\w.])` + regexp.QuoteMeta(prefix)).MatchString(snippet) {
			imports = append(imports, path)
		}
	}
	slices.Sort(imports)
	return "package main\n\nimport (\n\t" + strings.Join(imports, "\n\t") + "\n)\n\n" +
		"func main() {\n\tif err := run(context.Background()); err != nil {\n\t\tlog.Fatal(err)\n\t}\n}\n\n" +
		"func run(ctx context.Context) error {\n" + snippet + "\treturn nil\n}\n"
}

// goModule writes program as the main package of a module that requires
// this repository (as `go get` would, offline) and returns its folder.
func goModule(t *testing.T, root, program string) string {
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
	return dir
}

// checkReadmeFlags checks that every flag of the README's inline `sluice
// serve …` commands is a flag of `sluice serve`.
func checkReadmeFlags(t *testing.T, readme string) {
	t.Helper()
	help, err := exec.Command(binary, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("sluice serve --help: %v\n%s", err, help)
	}
	for _, span := range regexp.MustCompile("`sluice serve[^`]*`").FindAllString(readme, -1) {
		for _, flag := range regexp.MustCompile(`--[a-z][a-z0-9-]*`).FindAllString(span, -1) {
			if !bytes.Contains(help, []byte(flag)) {
				t.Errorf("README: %s uses %s, which sluice serve does not have", span, flag)
			}
		}
	}
}
