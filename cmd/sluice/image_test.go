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
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// docker runs the docker CLI with args and returns its standard output.
func docker(ctx context.Context, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// needDocker skips the test unless a docker CLI reaches a daemon.
func needDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the container image: skipped under -short")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no container runtime: the docker CLI is not installed, so the image is not built (CI may lack one too)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := docker(ctx, "info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("no container runtime: the docker daemon is not reachable, so the image is not built (CI may lack one too): %v", err)
	}
}

// TestContainerImage builds the image with scripts/image.sh and checks its
// configuration (numeric non-root user, ports, entrypoint), that it holds
// only the binary, the CA bundle and the data folder, and that a container
// of it serves: ready on /readyz, one POST /v2/ratelimit.limit with a root
// key from SLUICE_ROOT_KEYS, a 401 without it, writes nothing outside its
// /data volume, runs as uid 65532 and stops cleanly on docker stop. It
// skips when no docker daemon is reachable (set DOCKER_HOST for one on
// another socket), in CI too.
func TestContainerImage(t *testing.T) {
	needDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	image := fmt.Sprintf("sluice-imagetest:%d", time.Now().UnixNano())
	build := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "scripts", "image.sh"))
	build.Env = append(os.Environ(), "IMAGE="+image, "DIST="+t.TempDir(), "VERSION=v0.0.0-imagetest")
	start := time.Now()
	out, err := build.CombinedOutput()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = docker(ctx, "image", "rm", "-f", image)
	})
	if err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, out)
	}
	t.Logf("scripts/image.sh built %s in %v", image, time.Since(start).Round(time.Millisecond))

	t.Run("config", func(t *testing.T) { checkImageConfig(ctx, t, image) })
	t.Run("files", func(t *testing.T) { checkImageFiles(ctx, t, image) })
	t.Run("check", func(t *testing.T) { checkImageDefaults(ctx, t, image) })
	t.Run("serves", func(t *testing.T) { checkImageServes(ctx, t, image) })
}

// checkImageDefaults runs `sluice check` in the image, on its own
// settings: without a root key it must refuse the public address it
// listens on, and accept it with one.
func checkImageDefaults(ctx context.Context, t *testing.T, image string) {
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
			out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
			if (err != nil) != tc.fail || !strings.Contains(string(out), tc.want) {
				t.Fatalf("docker run %s check: %v\n%s\nwant it to fail: %v, and to print %q", image, err, out, tc.fail, tc.want)
			}
		})
	}
}

// checkImageConfig fails unless the image runs /sluice serve as user
// 65532 and exposes the API and admin ports.
func checkImageConfig(ctx context.Context, t *testing.T, image string) {
	out, err := docker(ctx, "image", "inspect", "--format", "{{json .Config}}", image)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		User         string
		ExposedPorts map[string]struct{}
		Entrypoint   []string
		Cmd          []string
		Env          []string
	}
	if err := json.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ports := slices.Sorted(func(yield func(string) bool) {
		for p := range cfg.ExposedPorts {
			if !yield(p) {
				return
			}
		}
	})
	switch {
	case cfg.User != "65532:65532":
		t.Errorf("User = %q, want 65532:65532", cfg.User)
	case !slices.Equal(ports, []string{"7070/tcp", "7071/tcp"}):
		t.Errorf("ExposedPorts = %v, want 7070/tcp and 7071/tcp", ports)
	case !slices.Equal(cfg.Entrypoint, []string{"/sluice"}) || !slices.Equal(cfg.Cmd, []string{"serve"}):
		t.Errorf("Entrypoint %q Cmd %q, want [/sluice] [serve]", cfg.Entrypoint, cfg.Cmd)
	case !slices.Contains(cfg.Env, "SLUICE_DATA_DIR=/data"):
		t.Errorf("Env = %q, want SLUICE_DATA_DIR=/data", cfg.Env)
	}
}

// imageEntry is one file of an image's layers.
type imageEntry struct {
	mode     int64
	uid, gid int
}

// checkImageFiles fails unless the image's layers (docker image save) hold
// exactly the binary, the CA bundle and the data folder (and their
// parents), with the binary executable and /data owned by 65532.
func checkImageFiles(ctx context.Context, t *testing.T, image string) {
	archive := filepath.Join(t.TempDir(), "image.tar")
	if _, err := docker(ctx, "image", "save", "-o", archive, image); err != nil {
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
func checkImageServes(ctx context.Context, t *testing.T, image string) {
	api, admin := freePort(t), freePort(t)
	name := strings.NewReplacer(":", "-").Replace(image)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = docker(ctx, "rm", "--force", "--volumes", name) // and its anonymous /data volume
	})
	if _, err := docker(ctx, "run", "-d", "--name", name, "--network", "host",
		"-e", "SLUICE_ROOT_KEYS="+imageRootKey+":acme",
		"-e", fmt.Sprintf("SLUICE_HTTP_ADDR=127.0.0.1:%d", api),
		"-e", fmt.Sprintf("SLUICE_ADMIN_ADDR=127.0.0.1:%d", admin),
		image); err != nil {
		t.Fatal(err)
	}
	logs := func() string {
		out, err := exec.CommandContext(ctx, "docker", "logs", name).CombinedOutput()
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
	checkContainerUser(ctx, t, name)
	diff, err := docker(ctx, "diff", name) // /data, a volume, is not listed: nothing should be
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(diff), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] != "/data" && !strings.HasPrefix(f[1], "/data/") {
			t.Errorf("the container changed %s outside /data (docker diff: %q)", f[1], line)
		}
	}
	if _, err := docker(ctx, "stop", "-t", "30", name); err != nil {
		t.Fatal(err)
	}
	if code, err := docker(ctx, "inspect", "--format", "{{.State.ExitCode}}", name); err != nil || strings.TrimSpace(code) != "0" {
		t.Fatalf("exit code after docker stop: %q %v; log:\n%s", code, err, logs())
	}
}

// checkContainerUser fails unless the container's configured user is
// 65532 and, where its process can be seen from here, it runs as uid 65532.
func checkContainerUser(ctx context.Context, t *testing.T, name string) {
	out, err := docker(ctx, "inspect", "--format", "{{.Config.User}} {{.State.Pid}}", name)
	if err != nil {
		t.Fatal(err)
	}
	var user string
	var pid int
	if _, err := fmt.Sscan(out, &user, &pid); err != nil || user != "65532:65532" {
		t.Fatalf("docker inspect: user and pid %q (%v), want user 65532:65532", out, err)
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
