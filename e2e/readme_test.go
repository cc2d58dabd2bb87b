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
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlock is one fenced code block of the README.
type readmeBlock struct {
	lang, code string
}

// readmeBlocks returns the fenced code blocks of the README.
func readmeBlocks(t *testing.T, readme string) []readmeBlock {
	t.Helper()
	var blocks []readmeBlock
	var cur *readmeBlock
	for line := range strings.Lines(readme) {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &readmeBlock{lang: strings.TrimPrefix(trimmed, "```")}
		case cur != nil && trimmed == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.code += line
		}
	}
	if cur != nil {
		t.Fatal("README: a code block is not closed")
	}
	return blocks
}

// readmeSkipped are the README's blocks that cannot run offline here, by
// their first line, with the reason.
var readmeSkipped = map[string]string{
	"make test":                           "runs the whole suite, of which this test is part, and needs Redis and MariaDB",
	`import { Unkey } from "@unkey/api";`: "needs the npm packages; e2e/TestNodeClient makes the same calls through them",
	`KEY_SHA256=$(printf %s "$KEY" | sluice hash-key)   # the configuration never holds the key itself`: "needs a certificate, a key and a public address; e2e TestTLS, TestHashedRootKey and TestAdminListener start the server so on loopback",
	"go get github.com/sluicehq/sluice": "needs the module proxy; httplimit's TestReadmeService builds the program that follows against this checkout",
	"package main":                      "the service of \"In a Go service\": httplimit's TestReadmeService builds it in a module of its own and sends it requests",
}

// TestReadme runs the README: the quick start's server (the command as
// written, on a free port through its environment variables) and the curl
// against it, and the library snippet as a program. Blocks that cannot run
// offline are listed in readmeSkipped; a new block fails the test until it
// is run here or listed there. The flags of the inline `sluice serve`
// commands must exist.
func TestReadme(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	for _, b := range readmeBlocks(t, string(readme)) {
		first, _, _ := strings.Cut(b.code, "\n")
		switch {
		case readmeSkipped[first] != "":
			t.Logf("not run: %q: %s", first, readmeSkipped[first])
		case b.lang == "sh" && strings.TrimSpace(b.code) == "go run ./cmd/sluice serve":
			addr = runReadmeServer(t, root, b.code)
		case b.lang == "sh" && strings.HasPrefix(first, "curl "):
			if addr == "" {
				t.Fatal("README: the curl comes before the server it calls")
			}
			runReadmeCurl(t, strings.ReplaceAll(b.code, "127.0.0.1:7070", addr))
		case b.lang == "go":
			runReadmeGo(t, root, b.code)
		default:
			t.Errorf("README block %q (%s) is neither run by TestReadme nor listed in readmeSkipped", first, b.lang)
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
	dir := t.TempDir()
	imports := []string{`"context"`, `"log"`}
	for pkg, path := range map[string]string{"errors.": `"errors"`, "time.": `"time"`, "fmt.": `"fmt"`, "sluice.": `"github.com/sluicehq/sluice"`} {
		if strings.Contains(snippet, pkg) {
			imports = append(imports, path)
		}
	}
	program := "package main\n\nimport (\n\t" + strings.Join(imports, "\n\t") + "\n)\n\n" +
		"func main() {\n\tif err := run(context.Background()); err != nil {\n\t\tlog.Fatal(err)\n\t}\n}\n\n" +
		"func run(ctx context.Context) error {\n" + snippet + "\treturn nil\n}\n"
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
	cmd := exec.CommandContext(ctx, "go", "run", "-mod=mod", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go snippet does not run: %v\n%s\n%s", err, out, program)
	}
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
