package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
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
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// ctr runs the container engine's CLI (docker or podman) with args and
// returns its standard output.
func ctr(ctx context.Context, engine string, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, engine, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", engine, strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// engineInstall is how scripts/services.sh makes a container engine
// available where no Docker daemon answers.
const engineInstall = "scripts/services.sh (or: sudo apt-get install -y podman)"

// containerEngine returns the engine that builds the image, as
// scripts/image.sh picks it: docker when a docker CLI reaches its daemon
// (DOCKER_HOST selects another socket), else podman, which needs neither
// a daemon nor a registry. Without either it skips t, or fails it when CI
// is set; under -short it skips.
func containerEngine(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the container image: skipped under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var tried []string
	for _, engine := range []string{"docker", "podman"} {
		if _, err := exec.LookPath(engine); err != nil {
			tried = append(tried, engine+" is not installed")
			continue
		}
		if _, err := ctr(ctx, engine, "info"); err != nil {
			tried = append(tried, err.Error())
			continue
		}
		return engine
	}
	msg := fmt.Sprintf("no container engine (%s); install one with %s", strings.Join(tried, "; "), engineInstall)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// imageVersion is the version the test stamps on the binary and the
// image's label.
const imageVersion = "v0.0.0-imagetest"

// TestContainerImage builds the image with scripts/image.sh, with docker
// where its daemon answers, else with podman (containerEngine), and checks
// its configuration (numeric non-root user, ports, entrypoint, environment,
// volume, version label) and that it holds only the binary, the CA bundle
// and the data folder. Where a container can run, it runs `sluice check`
// in the image and a container that serves: ready on /readyz, one POST
// /v2/ratelimit.limit with a root key from SLUICE_ROOT_KEYS, a 401 without
// it, writes nothing outside its /data volume, runs as uid 65532 and stops
// cleanly. Where the machine's sandbox refuses to run containers (its OCI
// runtime cannot set rlimits), those two parts skip with that reason, in
// CI too; without any engine the test skips, or fails when CI is set.
func TestContainerImage(t *testing.T) {
	engine := containerEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	image := fmt.Sprintf("sluice-imagetest:%d", time.Now().UnixNano())
	build := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "scripts", "image.sh"))
	build.Env = append(os.Environ(), "DOCKER="+engine, "IMAGE="+image, "DIST="+t.TempDir(), "VERSION="+imageVersion)
	start := time.Now()
	out, err := build.CombinedOutput()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = ctr(ctx, engine, "image", "rm", "-f", image)
	})
	if err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, out)
	}
	t.Logf("scripts/image.sh built %s with %s in %v", image, engine, time.Since(start).Round(time.Millisecond))

	t.Run("config", func(t *testing.T) { checkImageConfig(ctx, t, engine, image) })
	t.Run("files", func(t *testing.T) { checkImageFiles(ctx, t, engine, image) })
	refused := runRefused(ctx, t, engine, image)
	for _, run := range []struct {
		name  string
		check func(context.Context, *testing.T, string, string)
	}{
		{"check", checkImageDefaults},
		{"serves", checkImageServes},
	} {
		t.Run(run.name, func(t *testing.T) {
			if refused != "" {
				t.Skip(refused)
			}
			run.check(ctx, t, engine, image)
		})
	}
}

// runRefused runs `sluice version` in a container of image and returns
// why containers cannot run here ("" when they can): this machine's
// sandbox refuses the OCI runtime (crun or runc) the rlimits it sets. Any
// other failure, or a version other than the one stamped, fails t.
func runRefused(ctx context.Context, t *testing.T, engine, image string) string {
	t.Helper()
	out, err := ctr(ctx, engine, "run", "--rm", "--network", "none", image, "version")
	if err == nil {
		if !strings.Contains(out, imageVersion) {
			t.Fatalf("%s run %s version: %q, want version %s", engine, image, out, imageVersion)
		}
		return ""
	}
	if msg := err.Error(); strings.Contains(msg, "setrlimit") || strings.Contains(msg, "OCI permission denied") {
		return fmt.Sprintf("this machine's sandbox refuses to run a container (%s's OCI runtime cannot set rlimits), so the image is built and inspected but not run: %v", engine, err)
	}
	t.Fatalf("running a container of the image: %v", err)
	return ""
}

// checkImageDefaults runs `sluice check` in the image, on its own
// settings: without a root key it must refuse the public address it
// listens on, and accept it with one.
func checkImageDefaults(ctx context.Context, t *testing.T, engine, image string) {
	for _, tc := range []struct {
		name string
		env  []string
		fail bool
		want string
	}{
		{"no root key", nil, true, "--http-addr 0.0.0.0:7070 is not a loopback address and no root key is configured"},
		{"a root key", []string{"-e", "SLUICE_ROOT_KEYS=" + imageRootKey + ":acme"}, false,
			`ok: serve would listen on 0.0.0.0:7070 (admin "0.0.0.0:7071"), region local, origin memory, store sqlite, 1 root key(s)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"run", "--rm", "--network", "none"}, tc.env...), image, "check")
			out, err := exec.CommandContext(ctx, engine, args...).CombinedOutput()
			if (err != nil) != tc.fail || !strings.Contains(string(out), tc.want) {
				t.Fatalf("%s run %s check: %v\n%s\nwant it to fail: %v, and to print %q", engine, image, err, out, tc.fail, tc.want)
			}
		})
	}
}

// checkImageConfig fails unless the image runs /sluice serve as user
// 65532, exposes the API and admin ports, declares the /data volume, sets
// the environment of the Dockerfile and carries the version label that
// scripts/image.sh gives it.
func checkImageConfig(ctx context.Context, t *testing.T, engine, image string) {
	out, err := ctr(ctx, engine, "image", "inspect", "--format", "{{json .Config}}", image)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		User                  string
		ExposedPorts, Volumes map[string]struct{}
		Entrypoint, Cmd, Env  []string
		Labels                map[string]string
	}
	if err := json.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var env []string // the engine may add PATH
	for _, kv := range cfg.Env {
		if strings.HasPrefix(kv, "SLUICE_") || strings.HasPrefix(kv, "SSL_") {
			env = append(env, kv)
		}
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"User", cfg.User, "65532:65532"},
		{"ExposedPorts", slices.Sorted(maps.Keys(cfg.ExposedPorts)), []string{"7070/tcp", "7071/tcp"}},
		{"Volumes", slices.Sorted(maps.Keys(cfg.Volumes)), []string{"/data"}},
		{"Entrypoint", cfg.Entrypoint, []string{"/sluice"}},
		{"Cmd", cfg.Cmd, []string{"serve"}},
		{"Env (SLUICE_*, SSL_*)", env, []string{"SLUICE_HTTP_ADDR=0.0.0.0:7070", "SLUICE_ADMIN_ADDR=0.0.0.0:7071",
			"SLUICE_DATA_DIR=/data", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}},
		{"Labels[org.opencontainers.image.version]", cfg.Labels["org.opencontainers.image.version"], imageVersion},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
}

// imageEntry is one file of an image's layers.
type imageEntry struct {
	mode     int64
	uid, gid int
}

// checkImageFiles fails unless the image's layers (`image save`) hold
// exactly the binary, the CA bundle and the data folder (and their
// parents), with the binary executable and /data owned by 65532.
func checkImageFiles(ctx context.Context, t *testing.T, engine, image string) {
	archive := filepath.Join(t.TempDir(), "image.tar")
	if _, err := ctr(ctx, engine, "image", "save", "-o", archive, image); err != nil {
		t.Fatal(err)
	}
	files, err := imageFiles(archive)
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range files {
			if !yield(n) {
				return
			}
		}
	})
	want := []string{"data/", "etc/", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt", "sluice"}
	if !slices.Equal(names, want) {
		t.Fatalf("the image holds %q, want %q", names, want)
	}
	if files["sluice"].mode&0o111 == 0 {
		t.Errorf("/sluice has mode %o: not executable", files["sluice"].mode)
	}
	if d := files["data/"]; d.uid != 65532 || d.gid != 65532 {
		t.Errorf("/data is owned by %d:%d, want 65532:65532", d.uid, d.gid)
	}
}

// imageFiles lists the files of every layer of the `docker image save`
// (or `podman image save`, docker-archive format)
// archive at path, by name (folders end with '/').
func imageFiles(path string) (map[string]imageEntry, error) {
	outer, err := readTar(path)
	if err != nil {
		return nil, err
	}
	var manifest []struct{ Layers []string }
	if err := json.Unmarshal(outer["manifest.json"], &manifest); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if len(manifest) != 1 {
		return nil, fmt.Errorf("manifest.json: %d images, want 1", len(manifest))
	}
	files := map[string]imageEntry{}
	for _, layer := range manifest[0].Layers {
		var r io.Reader = bytes.NewReader(outer[layer])
		if bytes.HasPrefix(outer[layer], []byte{0x1f, 0x8b}) { // a compressed layer
			if r, err = gzip.NewReader(r); err != nil {
				return nil, fmt.Errorf("layer %s: %w", layer, err)
			}
		}
		tr := tar.NewReader(r)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("layer %s: %w", layer, err)
			}
			name := strings.TrimPrefix(h.Name, "./")
			if h.Typeflag == tar.TypeDir && !strings.HasSuffix(name, "/") {
				name += "/"
			}
			files[name] = imageEntry{mode: h.Mode, uid: h.Uid, gid: h.Gid}
		}
	}
	return files, nil
}

// readTar reads the regular files of the tar archive at path.
func readTar(path string) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			if out[h.Name], err = io.ReadAll(tr); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
	}
}

// freePort returns a TCP port free on loopback now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// imageRootKey is the root key that the container test configures.
const imageRootKey = "imagetest-0123456789abcdef"

// checkImageServes runs a container of image on the host's network, on
// free loopback ports, and talks to it.
func checkImageServes(ctx context.Context, t *testing.T, engine, image string) {
	api, admin := freePort(t), freePort(t)
	name := strings.NewReplacer(":", "-").Replace(image)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = ctr(ctx, engine, "rm", "--force", "--volumes", name) // and its anonymous /data volume
	})
	if _, err := ctr(ctx, engine, "run", "-d", "--name", name, "--network", "host",
		"-e", "SLUICE_ROOT_KEYS="+imageRootKey+":acme",
		"-e", fmt.Sprintf("SLUICE_HTTP_ADDR=127.0.0.1:%d", api),
		"-e", fmt.Sprintf("SLUICE_ADMIN_ADDR=127.0.0.1:%d", admin),
		image); err != nil {
		t.Fatal(err)
	}
	logs := func() string {
		out, err := exec.CommandContext(ctx, engine, "logs", name).CombinedOutput()
		return fmt.Sprintf("%s%v", out, err)
	}
	if err := waitReady(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", admin)); err != nil {
		t.Fatalf("%v; container log:\n%s", err, logs())
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/v2/ratelimit.limit", api)
	body := `{"namespace":"api","identifier":"user-42","limit":10,"duration":60000}`
	if code, resp := post(ctx, t, url, imageRootKey, body); code != http.StatusOK || !strings.Contains(resp, `"success":true`) || !strings.Contains(resp, `"remaining":9`) {
		t.Fatalf("POST /v2/ratelimit.limit with the root key: %d %s", code, resp)
	}
	if code, resp := post(ctx, t, url, "not-the-root-key-at-all", body); code != http.StatusUnauthorized {
		t.Fatalf("POST /v2/ratelimit.limit with another key: %d %s, want 401", code, resp)
	}
	checkContainerUser(ctx, t, engine, name)
	diff, err := ctr(ctx, engine, "diff", name) // /data, a volume, is not listed: nothing should be
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(diff), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] != "/data" && !strings.HasPrefix(f[1], "/data/") {
			t.Errorf("the container changed %s outside /data (%s diff: %q)", f[1], engine, line)
		}
	}
	if _, err := ctr(ctx, engine, "stop", "-t", "30", name); err != nil {
		t.Fatal(err)
	}
	if code, err := ctr(ctx, engine, "inspect", "--format", "{{.State.ExitCode}}", name); err != nil || strings.TrimSpace(code) != "0" {
		t.Fatalf("exit code after %s stop: %q %v; log:\n%s", engine, code, err, logs())
	}
}

// checkContainerUser fails unless the container's configured user is
// 65532 and, where its process can be seen from here, it runs as uid 65532.
func checkContainerUser(ctx context.Context, t *testing.T, engine, name string) {
	out, err := ctr(ctx, engine, "inspect", "--format", "{{.Config.User}} {{.State.Pid}}", name)
	if err != nil {
		t.Fatal(err)
	}
	var user string
	var pid int
	if _, err := fmt.Sscan(out, &user, &pid); err != nil || user != "65532:65532" {
		t.Fatalf("%s inspect: user and pid %q (%v), want user 65532:65532", engine, out, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Logf("the container's process %d is not visible here (%v): its uid is not checked", pid, err)
		return
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" && f[1] != "65532" {
			t.Fatalf("the container's process runs as uid %s, want 65532", f[1])
		}
	}
}

// waitReady polls url until it answers 200, for at most a minute.
func waitReady(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready within a minute: %w", url, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// post sends body to url with the bearer token key and returns the status
// and the response body.
func post(ctx context.Context, t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
