package main

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium returns the path of an installed Chromium. Without one the test
// is skipped, or fails when CI is set (scripts/services.sh installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium installed: apt-get install chromium (scripts/services.sh, run by make test, installs it when run as root)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium for the test and returns its context.
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return ctx
}

// TestConsoleInBrowser drives the console in a real headless Chromium: a
// generated load whose heavy hitter must show at the top of the denied
// list, a screenshot, and an override created, edited and deleted from the
// page, checked through the API. SLUICE_CONSOLE_SCREENSHOT=path also
// writes the screenshot there (docs/analytics-console.png).
func TestConsoleInBrowser(t *testing.T) {
	exe := chromium(t)
	s := startSluice(t)
	for i := range 120 {
		id := "heavy-hitter"
		if i%4 == 0 {
			id = fmt.Sprintf("user-%d", i)
		}
		if code, body := postJSON(t, s.URL+"/v2/ratelimit.limit", `{"namespace":"api","identifier":"`+id+`","limit":10,"duration":60000}`); code != 200 {
			t.Fatalf("limit: %d %s", code, body)
		}
	}
	ctx := browser(t, exe)
	err := chromedp.Do(ctx,
		chromedp.Navigate(s.AdminURL()+"/"),
		chromedp.Click(chromedp.CSS(`#namespaces li[data-namespace="api"] a`)),
		// The first denied row: heavy-hitter, 80 denials (90 requests, 10 passed).
		chromedp.Poll[chromedp.Void](`(() => { const r = document.querySelector("#top-denied tbody tr");
			return r !== null && r.cells[0].textContent === "heavy-hitter" && r.cells[1].textContent === "80"; })()`, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll("#chart polyline").length === 2`, chromedp.WithPollingTimeout(5*time.Second)),
	)
	if err != nil {
		t.Fatalf("the heavy hitter did not show at the top of the denied list: %v", err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	saveScreenshot(t, shot)
	editOverrides(t, ctx, s.URL)
}

// editOverrides creates, edits and deletes an override from the page and
// checks each step through the API.
func editOverrides(t *testing.T, ctx context.Context, api string) {
	row := `#overrides tbody tr[data-identifier="heavy-hitter"]`
	err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#top-denied tbody tr button`)), // "override" on the heavy hitter
		chromedp.SetValue(chromedp.CSS(`#override-limit`), "500"),
		chromedp.Click(chromedp.CSS(`#override-save`)),
		chromedp.WaitVisible(chromedp.CSS(row)),
	)
	if err != nil {
		t.Fatalf("creating an override: %v", err)
	}
	checkOverride(t, api, 200, `"limit":500`)
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(row+` button.edit`)),
		chromedp.SetValue(chromedp.CSS(`#override-limit`), "700"),
		chromedp.Click(chromedp.CSS(`#override-save`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('`+row+` td:nth-child(2)')?.textContent === "700"`, chromedp.WithPollingTimeout(10*time.Second)),
	)
	if err != nil {
		t.Fatalf("editing the override: %v", err)
	}
	checkOverride(t, api, 200, `"limit":700`)
	err = chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`#override-identifier`), "bad\u0001id"),
		chromedp.SetValue(chromedp.CSS(`#override-limit`), "1"),
		chromedp.Click(chromedp.CSS(`#override-save`)),
		chromedp.Poll[chromedp.Void](`document.querySelector("#error")?.textContent.includes("body.identifier")`, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Click(chromedp.CSS(row+` button.delete`)),
		chromedp.WaitNotPresent(chromedp.CSS(row)),
	)
	if err != nil {
		t.Fatalf("an invalid override's error, then deleting the override: %v", err)
	}
	checkOverride(t, api, 404, "ratelimit_override_not_found")
}

// checkOverride asks the API for the heavy hitter's override.
func checkOverride(t *testing.T, api string, code int, want string) {
	t.Helper()
	got, body := postJSON(t, api+"/v2/ratelimit.getOverride", `{"namespace":"api","identifier":"heavy-hitter"}`)
	if got != code || !strings.Contains(body, want) {
		t.Fatalf("getOverride: %d %s; want %d with %s", got, body, code, want)
	}
}

// saveScreenshot checks that shot is a PNG of the page's size and writes
// it to the test's folder, and to $SLUICE_CONSOLE_SCREENSHOT when set.
func saveScreenshot(t *testing.T, shot []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 500 {
		t.Fatalf("screenshot of %v, want the whole page", b)
	}
	paths := []string{filepath.Join(t.TempDir(), "console.png")}
	if p := os.Getenv("SLUICE_CONSOLE_SCREENSHOT"); p != "" {
		paths = append(paths, p)
	}
	for _, p := range paths {
		if err := os.WriteFile(p, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", p, len(shot))
	}
}
