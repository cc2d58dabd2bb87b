package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestTutorials runs each page of docs/tutorials as a reader would: its
// shell blocks in order in one bash session (variables and background
// servers carry over from block to block), each text or json block that
// follows a shell block compared with what that block printed, and its Go
// blocks compiled. The page's addresses are rewritten to free loopback
// ports, its Redis (127.0.0.1:6379) to a redis-server of the test's own and
// its MySQL DSN to a fresh database, so that a run starts from nothing and
// disturbs nothing. A page that needs Redis or MariaDB is skipped when they
// are missing, and fails then under CI.
func TestTutorials(t *testing.T) {
	root := repoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "tutorials", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no tutorials in docs/tutorials (%v)", err)
	}
	for _, page := range pages {
		t.Run(strings.TrimSuffix(filepath.Base(page), ".md"), func(t *testing.T) {
			runTutorial(t, root, page)
		})
	}
}

// tutorialBuild is the build command of the tutorials. TestMain has built
// the same package; its binary stands in for the one the command writes.
const tutorialBuild = "go build -o sluice ./cmd/sluice"

// runTutorial runs the page at path.
func runTutorial(t *testing.T, root, path string) {
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := docBlocks(string(text))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		skipOrFail(t, "the tutorials call the server with curl, which is not installed")
	}
	env := newTutorialEnv(t, blocks)
	awayFromRollovers(t, blocks)
	dir := t.TempDir()
	sh := startShell(t, dir, env.vars())
	for i := 0; i < len(blocks); i++ {
		b := blocks[i]
		var want *docBlock
		if i+1 < len(blocks) && isOutputBlock(blocks[i+1]) {
			want, i = &blocks[i+1], i+1
		}
		switch {
		case b.notRun != "":
			t.Logf("line %d: not run: %s", b.line, b.notRun)
		case b.lang == "sh" && strings.TrimSpace(b.code) == tutorialBuild:
			if err := os.Symlink(binary, filepath.Join(dir, "sluice")); err != nil {
				t.Fatal(err)
			}
			t.Logf("line %d: %s: TestMain built it", b.line, tutorialBuild)
		case b.lang == "sh":
			runShellBlock(t, sh, env, b, want)
		case b.lang == "go" && want == nil:
			buildGoSnippet(t, root, b.code)
		default:
			t.Errorf("line %d: a %q block is neither run nor marked %q", b.line, b.lang, notRunMarker+" why -->")
		}
	}
	t.Logf("what the page's commands wrote to standard error:\n%s", sh.stderr())
}

// isOutputBlock reports whether b shows what the shell block before it
// prints.
func isOutputBlock(b docBlock) bool {
	return (b.lang == "json" || b.lang == "text") && b.notRun == ""
}

// runShellBlock runs one shell block of a tutorial in the session, waits
// for the servers it starts in the background, and compares what it
// printed with want, if given.
func runShellBlock(t *testing.T, sh *shellSession, env *tutorialEnv, b docBlock, want *docBlock) {
	t.Helper()
	code := env.rewrite(b.code)
	out, status, err := sh.run(code, 2*time.Minute)
	if err != nil || status != 0 {
		t.Fatalf("line %d: status %d, %v:\n%s\noutput:\n%s\nshell's stderr:\n%s", b.line, status, err, code, out, sh.stderr())
	}
	for _, s := range startedServers(code, env) {
		waitServing(t, s, sh)
	}
	if want != nil {
		if err := matchOutput(want.lang, want.code, out); err != nil {
			t.Fatalf("line %d: the output differs from the block at line %d: %v\ncommand:\n%s\noutput:\n%s", b.line, want.line, err, code, out)
		}
	}
}

// awayFromRollovers waits, when needed, until every window a tutorial's
// requests name ("duration":…) has long enough left for the page to run
// in one window: the outputs it shows count within one window.
func awayFromRollovers(t *testing.T, blocks []docBlock) {
	t.Helper()
	re := regexp.MustCompile(`"duration":(\d+)`)
	for _, b := range blocks {
		for _, m := range re.FindAllStringSubmatch(b.code, -1) {
			ms, _ := strconv.Atoi(m[1])
			window := time.Duration(ms) * time.Millisecond
			testenv.AwayFromRollover(t, window, min(window/2, 40*time.Second))
		}
	}
}

// tutorialDSN is the MySQL DSN the tutorials use: scripts/services.sh's
// MariaDB.
const tutorialDSN = "root@tcp(127.0.0.1:3306)/test"

// loopbackRe matches the loopback addresses of a tutorial.
var loopbackRe = regexp.MustCompile(`127\.0\.0\.1:\d+`)

// tutorialEnv is what a tutorial runs on: its loopback addresses mapped to
// the test's, and the DSN of a fresh database for tutorialDSN.
type tutorialEnv struct {
	addrs map[string]string
	dsn   string
}

// newTutorialEnv maps each loopback address of the blocks to a free port,
// but 127.0.0.1:6379, Redis, to a redis-server of the test's own, and
// 127.0.0.1:3306, with tutorialDSN, to the test's MariaDB and a fresh
// database. It skips t when the page needs Redis or MariaDB and they are
// missing (fails it under CI).
func newTutorialEnv(t *testing.T, blocks []docBlock) *tutorialEnv {
	t.Helper()
	env := &tutorialEnv{addrs: map[string]string{}}
	// The server's defaults, which a page may use without naming them.
	all := []string{"127.0.0.1:7070", "127.0.0.1:7071"}
	for _, b := range blocks {
		all = append(all, loopbackRe.FindAllString(b.code, -1)...)
		if strings.Contains(b.code, tutorialDSN) {
			env.dsn = freshDatabase(t)
		}
	}
	for _, a := range all {
		if env.addrs[a] != "" {
			continue
		}
		switch a {
		case "127.0.0.1:6379":
			if _, err := exec.LookPath("redis-server"); err != nil {
				skipOrFail(t, "the page needs Redis and redis-server is not installed; run `scripts/services.sh`")
			}
			env.addrs[a] = testenv.StartRedis(t).Addr
		case "127.0.0.1:3306":
			if env.dsn == "" {
				t.Fatalf("the page names %s without the DSN %s, which the test knows how to rewrite", a, tutorialDSN)
			}
			env.addrs[a] = a // only inside the DSN, rewritten whole
		default:
			env.addrs[a] = freeLoopback(t)
		}
	}
	return env
}

// skipOrFail skips t, or fails it under CI (the environment variable CI is
// set), where every service must be there.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// freshDatabase creates a database of its own on the test's MariaDB
// ($SLUICE_TEST_MYSQL_DSN, else root at $SLUICE_TEST_MYSQL_ADDR or
// 127.0.0.1:3306), drops it when the test ends and returns its DSN. It
// skips t when MariaDB is not reachable.
func freshDatabase(t *testing.T) string {
	t.Helper()
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", "127.0.0.1:3306"
	if a := os.Getenv("SLUICE_TEST_MYSQL_ADDR"); a != "" {
		cfg.Addr = a
	}
	if dsn := os.Getenv("SLUICE_TEST_MYSQL_DSN"); dsn != "" {
		parsed, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatalf("SLUICE_TEST_MYSQL_DSN: %v", err)
		}
		cfg = parsed
	}
	if c, err := net.DialTimeout("tcp", cfg.Addr, 2*time.Second); err != nil {
		skipOrFail(t, fmt.Sprintf("the page needs MariaDB, not reachable at %s (%v); run `scripts/services.sh`", cfg.Addr, err))
	} else {
		c.Close()
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("sluice_tutorial_%d", time.Now().UnixNano())
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		db.Close()
		t.Fatalf("creating the tutorial's database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec("DROP DATABASE " + name); err != nil {
			t.Errorf("dropping the tutorial's database: %v", err)
		}
		db.Close()
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// freeLoopback returns a loopback address whose port was free a moment ago.
func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// rewrite returns code with the tutorial's DSN and addresses replaced by
// the test's.
func (e *tutorialEnv) rewrite(code string) string {
	const dsn = "\x00dsn\x00"
	if e.dsn != "" {
		code = strings.ReplaceAll(code, tutorialDSN, dsn)
	}
	code = loopbackRe.ReplaceAllStringFunc(code, func(a string) string { return e.addrs[a] })
	return strings.ReplaceAll(code, dsn, e.dsn)
}

// vars is the environment of the session: the test's, without SLUICE_*
// variables, and the server's default addresses moved to the test's ports,
// for a `sluice serve` that names none.
func (e *tutorialEnv) vars() []string {
	return append(cleanEnv(),
		"SLUICE_HTTP_ADDR="+e.addrs["127.0.0.1:7070"],
		"SLUICE_ADMIN_ADDR="+e.addrs["127.0.0.1:7071"])
}

// server is the API and admin address of a server a block started.
type server struct{ api, admin string }

// startedServers returns the servers code starts in the background: each
// `sluice serve … &` command, at its --http-addr and --admin-addr or the
// defaults the session moves.
func startedServers(code string, env *tutorialEnv) []server {
	var out []server
	flag := func(line, name, def string) string {
		if m := regexp.MustCompile(name + `[ =](\S+)`).FindStringSubmatch(line); m != nil {
			return m[1]
		}
		return def
	}
	for line := range strings.Lines(strings.ReplaceAll(code, "\\\n", " ")) {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "sluice serve") && strings.HasSuffix(line, "&") {
			out = append(out, server{
				api:   flag(line, "--http-addr", env.addrs["127.0.0.1:7070"]),
				admin: flag(line, "--admin-addr", env.addrs["127.0.0.1:7071"]),
			})
		}
	}
	return out
}

// waitServing waits until s answers /v2/liveness and its admin listener
// says it is ready, as a reader's next command expects.
func waitServing(t *testing.T, s server, sh *shellSession) {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	ok := func(url, body string) bool {
		res, err := hc.Get(url)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode == http.StatusOK && strings.Contains(string(b), body)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if ok("http://"+s.api+"/v2/liveness", `"OK"`) && ok("http://"+s.admin+"/readyz", "ready") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server on %s (admin %s) is not ready after 30 s; shell's stderr:\n%s", s.api, s.admin, sh.stderr())
		}
	}
}

// matchOutput compares what a block printed with the output a page shows,
// line by line, blank lines left out. A text block must match exactly; in
// a json block each line is a JSON value whose fields must all match,
// except the values that change from run to run (volatileJSON).
func matchOutput(lang, want, got string) error {
	wl, gl := nonBlankLines(want), nonBlankLines(got)
	if len(wl) != len(gl) {
		return fmt.Errorf("%d lines, want %d", len(gl), len(wl))
	}
	for i := range wl {
		if lang == "text" {
			if wl[i] != gl[i] {
				return fmt.Errorf("line %d: %q, want %q", i+1, gl[i], wl[i])
			}
			continue
		}
		var w, g any
		if err := decodeJSON(wl[i], &w); err != nil {
			return fmt.Errorf("the page's line %d is not JSON: %w", i+1, err)
		}
		if err := decodeJSON(gl[i], &g); err != nil {
			return fmt.Errorf("line %d is not JSON: %w", i+1, err)
		}
		if err := matchJSON(w, g, ""); err != nil {
			return fmt.Errorf("line %d: %w", i+1, err)
		}
	}
	return nil
}

func nonBlankLines(s string) []string {
	var out []string
	for line := range strings.Lines(s) {
		if line = strings.TrimRight(line, " \r\n"); strings.TrimSpace(line) != "" {
			out = append(out, line)
		}
	}
	return out
}

func decodeJSON(s string, v any) error {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	return d.Decode(v)
}

// volatileJSON are the fields whose values change from run to run, with
// the prefix their string values keep; "" for a number.
var volatileJSON = map[string]string{"requestId": "req_", "overrideId": "rlor_", "reset": ""}

// matchJSON compares got with want, field by field: the same keys, the
// same values, but the volatile fields, which need only be of their kind.
func matchJSON(want, got any, key string) error {
	if prefix, ok := volatileJSON[key]; ok {
		s, isString := got.(string)
		_, isNumber := got.(json.Number)
		if (prefix == "" && !isNumber) || (prefix != "" && (!isString || !strings.HasPrefix(s, prefix))) {
			return fmt.Errorf("%s: %v is not what the page shows the kind of (%v)", key, got, want)
		}
		return nil
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v, want an object", key, got)
		}
		wk, gk := slices.Sorted(maps.Keys(w)), slices.Sorted(maps.Keys(g))
		if !slices.Equal(wk, gk) {
			return fmt.Errorf("%s: fields %v, want %v", key, gk, wk)
		}
		for _, k := range wk {
			if err := matchJSON(w[k], g[k], k); err != nil {
				return err
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: %v, want %d elements", key, got, len(w))
		}
		for i := range w {
			if err := matchJSON(w[i], g[i], key); err != nil {
				return err
			}
		}
		return nil
	}
	if fmt.Sprint(want) != fmt.Sprint(got) {
		return fmt.Errorf("%s: %v, want %v", key, got, want)
	}
	return nil
}

// shellSession is one bash process that runs a page's shell blocks in
// order, read from its standard input as a reader types them into one
// terminal. It runs in a process group of its own, with whatever it starts
// in the background, all ended when the test ends.
type shellSession struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	errOut *os.File
}

// blockDone is printed, with the block's status, after each block.
const blockDone = "__docs_block_done"

// startShell starts bash in dir with env.
func startShell(t *testing.T, dir string, env []string) *shellSession {
	t.Helper()
	errOut, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "--noprofile", "--norc", "-s")
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, w, errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	s := &shellSession{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 1024), errOut: errOut}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	t.Cleanup(func() { s.close(); r.Close(); errOut.Close() })
	return s
}

// run runs code and returns what it printed and its status.
func (s *shellSession) run(code string, timeout time.Duration) (string, int, error) {
	if _, err := fmt.Fprintf(s.stdin, "%s\nprintf '\\n%s %%d\\n' \"$?\"\n", strings.TrimRight(code, "\n"), blockDone); err != nil {
		return "", -1, fmt.Errorf("writing to the shell: %w", err)
	}
	var out strings.Builder
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				return out.String(), -1, errors.New("the shell exited")
			}
			if rest, done := strings.CutPrefix(line, blockDone+" "); done {
				status, err := strconv.Atoi(rest)
				return out.String(), status, err
			}
			out.WriteString(line + "\n")
		case <-timer.C:
			return out.String(), -1, fmt.Errorf("not done after %v", timeout)
		}
	}
}

// stderr returns what the session and its servers wrote to standard error.
func (s *shellSession) stderr() string {
	b, _ := os.ReadFile(s.errOut.Name())
	return string(b)
}

// close ends the shell and everything it started: SIGTERM to its process
// group (the servers stop gracefully), SIGKILL after 20 s.
func (s *shellSession) close() {
	s.stdin.Close()
	pgid := s.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	// The servers may outlive the shell by a moment: wait until the group
	// is gone, so that their ports and files are released.
	for deadline := time.Now().Add(20 * time.Second); syscall.Kill(-pgid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			s.t.Errorf("the tutorial's processes did not stop within 20 s of SIGTERM:\n%s", s.stderr())
			return
		}
	}
}

// buildGoSnippet compiles a Go block of a page: a whole file when it starts
// with a package clause, else the body of a function returning an error,
// in a module that requires this repository.
func buildGoSnippet(t *testing.T, root, snippet string) {
	t.Helper()
	program := snippet
	if !strings.HasPrefix(strings.TrimSpace(snippet), "package ") {
		program = snippetProgram(snippet)
	}
	dir := goModule(t, root, program)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-mod=mod", "-o", os.DevNull, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("a Go block does not build: %v\n%s\n%s", err, out, program)
	}
}
