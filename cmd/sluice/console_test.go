package main

import (
	"bytes"
	"context"
	"encoding/json"
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
// generated load in two namespaces, one named with characters that URLs
// escape; the first page, which lists both with their passed and denied
// decisions of the last hour; a namespace's URL opened directly, showing
// that namespace; links, back and forward between the views; the heavy
// hitter at the top of the denied list; a screenshot; an override
// created, edited and deleted from the page, checked through the API; and
// the message of a link to an unknown namespace or a malformed one.
// SLUICE_CONSOLE_SCREENSHOT=path also writes the screenshot there
// (docs/analytics-console.png).
func TestConsoleInBrowser(t *testing.T) {
	exe := chromium(t)
	s := startSluice(t)
	for i := range 120 { // api: 40 passed, 80 denied (heavy-hitter's, past its 10)
		id := "heavy-hitter"
		if i%4 == 0 {
			id = fmt.Sprintf("user-%d", i)
		}
		if code, body := postJSON(t, s.URL+"/v2/ratelimit.limit", `{"namespace":"api","identifier":"`+id+`","limit":10,"duration":60000}`); code != 200 {
			t.Fatalf("limit: %d %s", code, body)
		}
	}
	for range 8 { // shop: 5 passed, 3 denied
		if code, body := postJSON(t, s.URL+"/v2/ratelimit.limit", `{"namespace":"`+shop+`","identifier":"buyer","limit":5,"duration":60000}`); code != 200 {
			t.Fatalf("limit: %d %s", code, body)
		}
	}
	ctx := browser(t, exe)
	firstPage(t, ctx, s.AdminURL())
	ctx = linkedViews(t, ctx, s.AdminURL())
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	saveScreenshot(t, shot)
	editOverrides(t, ctx, s.URL)
	unknownViews(t, ctx, s.AdminURL())
}

// shop is a namespace whose name URLs escape, and shopURL the fragment of
// its view (encodeURIComponent of each name).
const (
	shop    = "shop/eu #1 ü%"
	shopURL = "#/ws/default/ns/shop%2Feu%20%231%20%C3%BC%25"
)

// Conditions the tests poll for, in JavaScript. shopShown's identifier
// "buyer" was denied 3 times; heavyShown's "heavy-hitter" 80.
var (
	shopShown = `document.querySelector("#title").textContent === ` + jsString(shop) + ` && !document.querySelector("#detail").hidden &&
		document.querySelector("#subtitle").textContent === "workspace default" &&
		document.querySelector("#top-denied tbody tr")?.cells[0].textContent === "buyer" &&
		document.querySelector("#top-denied tbody tr")?.cells[1].textContent === "3"`
	heavyShown = `document.querySelector("#title").textContent === "api" && !document.querySelector("#detail").hidden &&
		document.querySelector("#top-denied tbody tr")?.cells[0].textContent === "heavy-hitter" &&
		document.querySelector("#top-denied tbody tr")?.cells[1].textContent === "80" &&
		document.querySelectorAll("#chart polyline").length === 2`
	homeShown = `!document.querySelector("#home").hidden && document.querySelector("#detail").hidden &&
		document.querySelectorAll("#namespaces tbody tr").length === 2`
)

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s) // a string: cannot fail
	return string(b)
}

// poll waits up to 10 s for a condition to hold on the page.
func poll(cond string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(10*time.Second))
}

// firstPage opens the console's first page and checks that it lists both
// namespaces with their passed and denied decisions of the last hour and
// links each to its view, the names escaped.
func firstPage(t *testing.T, ctx context.Context, admin string) {
	t.Helper()
	err := chromedp.Do(ctx,
		chromedp.Navigate(admin+"/"),
		poll(`(() => {
			const row = (ns) => [...document.querySelectorAll("#namespaces tbody tr")].find((r) => r.dataset.namespace === ns);
			const a = row("api"), b = row(`+jsString(shop)+`);
			return a !== undefined && b !== undefined && document.querySelector("#more").hidden &&
				a.cells[2].textContent === "40" && a.cells[3].textContent === "80" &&
				b.cells[2].textContent === "5" && b.cells[3].textContent === "3" &&
				b.cells[1].textContent === "default" && b.querySelector("a").getAttribute("href") === `+jsString(shopURL)+`;
		})()`),
	)
	if err != nil {
		t.Fatalf("the first page did not list api (40 passed, 80 denied) and the shop (5, 3) with their links: %v", err)
	}
}

// newTab opens a tab of ctx's browser, closed when the test ends.
func newTab(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(ctx)
	t.Cleanup(cancel)
	return tab
}

// linkedViews opens the shop's URL directly in a new tab, as a shared
// link opens, then moves between the views by links and by the back and
// forward buttons, and returns the tab, on api's view.
func linkedViews(t *testing.T, ctx context.Context, admin string) context.Context {
	t.Helper()
	tab := newTab(t, ctx)
	steps := []struct {
		name   string
		action chromedp.Action[chromedp.Void]
		want   string
	}{
		{"open the shop's URL", chromedp.Navigate(admin + "/" + shopURL), shopShown},
		{"link to the first page", chromedp.Click(chromedp.CSS(`#detail .crumbs a`)), homeShown},
		{"link to api", chromedp.Click(chromedp.CSS(`#namespaces tbody tr[data-namespace="api"] a`)), heavyShown},
		{"back", chromedp.Evaluate[chromedp.Void](`history.back()`), homeShown},
		{"back again", chromedp.Evaluate[chromedp.Void](`history.back()`), shopShown},
		{"forward", chromedp.Evaluate[chromedp.Void](`history.forward()`), homeShown},
		{"forward again", chromedp.Evaluate[chromedp.Void](`history.forward()`), heavyShown},
	}
	for _, st := range steps {
		if err := chromedp.Do(tab, st.action, poll(st.want)); err != nil {
			url, _ := chromedp.Run(tab, chromedp.Evaluate[string](`location.href`))
			t.Fatalf("%s (at %s): the view did not show: %v", st.name, url, err)
		}
	}
	return tab
}

// unknownViews opens links to a namespace that does not exist and to
// malformed fragments, each in a new tab: each shows its message, not a
// blank page.
func unknownViews(t *testing.T, ctx context.Context, admin string) {
	t.Helper()
	for _, tc := range []struct{ name, fragment, want string }{
		{"unknown namespace", "#/ws/default/ns/nope%2F1", "There is no namespace “nope/1” in workspace “default”."},
		{"unknown workspace", "#/ws/elsewhere/ns/api", "There is no namespace “api” in workspace “elsewhere”."},
		{"malformed escape", "#/ws/default/ns/%E0%A4%A", "not escaped properly"},
		{"no such view", "#/nothing", "names no view of the console"},
	} {
		tab := newTab(t, ctx)
		err := chromedp.Do(tab,
			chromedp.Navigate(admin+"/"+tc.fragment),
			poll(`!document.querySelector("#missing").hidden && document.querySelector("#detail").hidden &&
				document.querySelector("#missing-text").textContent.includes(`+jsString(tc.want)+`)`),
		)
		if err != nil {
			text, _ := chromedp.Run(tab, chromedp.TextContent(chromedp.CSS(`main`)))
			t.Fatalf("%s: no message %q: %v; the page: %.300s", tc.name, tc.want, err, strings.Join(strings.Fields(text), " "))
		}
	}
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
