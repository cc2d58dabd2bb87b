package e2e

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// This file checks the documentation as a reader meets it: every relative
// link and #anchor of the Markdown pages resolves (TestDocLinks), the index
// lists every page (TestDocIndex), and the tutorials run as written
// (TestTutorials, in tutorial_test.go).

// docBlock is one fenced code block of a Markdown page.
type docBlock struct {
	lang   string // the first word of the info string: sh, go, json, text…
	code   string
	line   int    // the line of the opening fence, from 1
	notRun string // the reason of a notRunMarker on the line before the fence
}

// notRunMarker opens the HTML comment that marks the block right after it
// as run by no test, with the reason: "<!-- not run: why -->". Such blocks
// should be rare: a block a reader copies should be run or compiled.
const notRunMarker = "<!-- not run:"

// docBlocks returns the fenced code blocks of a Markdown page, with the
// reason of the notRunMarker before each, if any.
func docBlocks(page string) ([]docBlock, error) {
	var (
		blocks []docBlock
		cur    *docBlock
		fence  string
		prev   string
		n      int
	)
	for line := range strings.Lines(page) {
		n++
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && fenceOf(trimmed) != "":
			fence = fenceOf(trimmed)
			cur = &docBlock{lang: firstWord(trimmed[len(fence):]), line: n}
			if m, ok := strings.CutPrefix(prev, notRunMarker); ok {
				cur.notRun = strings.TrimSpace(strings.TrimSuffix(m, "-->"))
				if cur.notRun == "" {
					return nil, fmt.Errorf("line %d: a %q marker without a reason", n-1, notRunMarker)
				}
			}
		case cur != nil && strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.code += line
		}
		prev = trimmed
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: a code block is not closed", cur.line)
	}
	return blocks, nil
}

// fenceOf returns the fence (three or more backticks or tildes) that opens
// line, or "".
func fenceOf(line string) string {
	for _, c := range []string{"`", "~"} {
		fence := line[:len(line)-len(strings.TrimLeft(line, c))]
		if len(fence) >= 3 {
			return fence
		}
	}
	return ""
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

// proseLines calls f with each line of page outside fenced code blocks,
// numbered from 1.
func proseLines(page string, f func(n int, line string)) {
	fence, n := "", 0
	for line := range strings.Lines(page) {
		n++
		trimmed := strings.TrimSpace(line)
		switch {
		case fence == "" && fenceOf(trimmed) != "":
			fence = fenceOf(trimmed)
		case fence != "":
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
			}
		default:
			f(n, strings.TrimRight(line, "\n"))
		}
	}
}

// blankCodeSpans replaces each inline code span of line (a run of
// backticks, up to the next run of as many) with spaces.
func blankCodeSpans(line string) string {
	b := []byte(line)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(b) && b[j] == '`' {
			j++
		}
		run := string(b[i:j])
		end := -1
		for k := j; k < len(b); {
			m := k
			for m < len(b) && b[m] == '`' {
				m++
			}
			if m > k && m-k == len(run) {
				end = m
				break
			}
			k = max(m, k+1)
		}
		if end < 0 {
			i = j
			continue
		}
		for k := i; k < end; k++ {
			b[k] = ' '
		}
		i = end
	}
	return string(b)
}

var (
	// inlineLinkRe matches the target of [text](target) and ![alt](target),
	// with an optional title.
	inlineLinkRe = regexp.MustCompile(`\]\(\s*<?([^()\s<>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// refDefRe matches a link reference definition: [label]: target.
	refDefRe = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// schemeRe matches an absolute URL (https:, mailto:…), not checked here.
	schemeRe = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// headingRe matches an ATX heading and captures its text.
	headingRe = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)
	// linkTextRe matches a whole inline link, to keep its text in a heading.
	linkTextRe = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	// htmlAnchorRe matches an explicit anchor: <a name="x"> or id="x".
	htmlAnchorRe = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	// lineAnchorRe matches GitHub's line anchors of a source file.
	lineAnchorRe = regexp.MustCompile(`^L\d+(-L\d+)?$`)
)

// docLink is one link of a Markdown page.
type docLink struct {
	line   int
	target string
}

// pageLinks returns the links of a Markdown page outside code.
func pageLinks(page string) []docLink {
	var links []docLink
	proseLines(page, func(n int, line string) {
		line = blankCodeSpans(line)
		for _, m := range inlineLinkRe.FindAllStringSubmatch(line, -1) {
			links = append(links, docLink{n, m[1]})
		}
		if m := refDefRe.FindStringSubmatch(line); m != nil {
			links = append(links, docLink{n, m[1]})
		}
	})
	return links
}

// headingSlug is GitHub's anchor of a heading: its text lowercased, spaces
// turned into '-', and every character dropped that is not a letter, a
// digit, '-' or '_' (so inline code and emphasis marks go, their text
// stays).
func headingSlug(heading string) string {
	text := linkTextRe.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// pageAnchors returns the anchors of a Markdown page: one per heading,
// a repeated heading's suffixed -1, -2… as GitHub does, and explicit
// <a name> or id anchors.
func pageAnchors(page string) map[string]bool {
	anchors, seen := map[string]bool{}, map[string]int{}
	proseLines(page, func(_ int, line string) {
		if m := headingRe.FindStringSubmatch(line); m != nil {
			s := headingSlug(m[1])
			if n := seen[s]; n > 0 {
				anchors[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchorRe.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
	})
	return anchors
}

// linkChecker resolves the links of the pages of one repository, reading
// each target page's anchors once.
type linkChecker struct {
	root    string
	anchors map[string]map[string]bool
}

// check returns why the link target of the page at path does not resolve,
// or nil. Absolute URLs are not checked.
func (c *linkChecker) check(path, target string) error {
	if schemeRe.MatchString(target) {
		return nil
	}
	rawPath, frag, _ := strings.Cut(target, "#")
	p, err := url.PathUnescape(rawPath)
	if err != nil {
		return fmt.Errorf("bad escape: %w", err)
	}
	file := path
	switch {
	case strings.HasPrefix(p, "/"):
		file = filepath.Join(c.root, p)
	case p != "":
		file = filepath.Join(filepath.Dir(path), p)
	}
	rel, err := filepath.Rel(c.root, file)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return errors.New("leaves the repository")
	}
	info, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("%s does not exist", rel)
	}
	switch {
	case frag == "":
		return nil
	case info.IsDir():
		return fmt.Errorf("an anchor on the folder %s", rel)
	case !strings.HasSuffix(file, ".md"):
		if lineAnchorRe.MatchString(frag) {
			return nil
		}
		return fmt.Errorf("%s is not Markdown: only line anchors (#L12) resolve", rel)
	}
	if c.anchors[file] == nil {
		text, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("reading %s: %w", rel, err)
		}
		c.anchors[file] = pageAnchors(string(text))
	}
	if !c.anchors[file][frag] {
		return fmt.Errorf("%s has no heading whose anchor is #%s", rel, frag)
	}
	return nil
}

// docPages returns the Markdown pages the docs tests check: those at the
// root of the repository and under docs/ (the generated ones included:
// their links must resolve too).
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// repoRoot returns the repository's root: the parent of this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestDocLinks checks every relative link of the README, the other
// Markdown pages at the root and the pages under docs/: its file or folder exists in the repository, and its
// #anchor, if any, is the anchor of a heading of that page by GitHub's
// rules (lowercase, spaces to '-', punctuation but '-' and '_' dropped, a
// repeated heading suffixed -1, -2…). Links to other sites are not
// followed. Nor does a page cite, in a link or in its text, a file
// outside the repository (see citesOutside), which a reader of the
// repository does not have.
func TestDocLinks(t *testing.T) {
	root := repoRoot(t)
	c := &linkChecker{root: root, anchors: map[string]map[string]bool{}}
	names := markdownNames(t, root)
	for _, path := range docPages(t, root) {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		for _, l := range pageLinks(string(text)) {
			if err := c.check(path, l.target); err != nil {
				t.Errorf("%s:%d: (%s): %v", rel, l.line, l.target, err)
			}
		}
		if cited := citesOutside(root, path, string(text), names); cited != "" {
			t.Errorf("%s cites %s, which is not in the repository", rel, cited)
		}
	}
}

var (
	// upRe finds a path that climbs folders, in a link or in the text.
	upRe = regexp.MustCompile(`(?:\.\./)+[\w.-]+`)
	// mdNameRe finds the name of a Markdown file in the text.
	mdNameRe = regexp.MustCompile(`[\w./-]*\w\.md\b`)
)

// citesOutside returns the first path page's text names that is not in
// the repository at root, or "": a path that climbs above the root, or a
// Markdown file of which the repository holds no file of that name
// (names, see markdownNames).
func citesOutside(root, page, text string, names map[string]bool) string {
	for _, up := range upRe.FindAllString(text, -1) {
		rel, err := filepath.Rel(root, filepath.Join(filepath.Dir(page), up))
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return up
		}
	}
	for _, name := range mdNameRe.FindAllString(text, -1) {
		if !names[filepath.Base(name)] {
			return name
		}
	}
	return ""
}

// markdownNames returns the base names of the Markdown files in the
// repository at root.
func markdownNames(t *testing.T, root string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			names[d.Name()] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestDocIndex checks that docs/index.md links to every Markdown page
// under docs/, so that a new page cannot be left out of it.
func TestDocIndex(t *testing.T) {
	root := repoRoot(t)
	index := filepath.Join(root, "docs", "index.md")
	text, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{index: true}
	for _, l := range pageLinks(string(text)) {
		if p, _, _ := strings.Cut(l.target, "#"); p != "" && !schemeRe.MatchString(p) {
			linked[filepath.Join(filepath.Dir(index), p)] = true
		}
	}
	err = filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") && !linked[path] {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("docs/index.md does not link to %s", rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDocCheckers checks the parts of TestDocLinks against GitHub's
// behaviour on known cases: the anchors of headings with code, links,
// punctuation and repeats, code spans and fences that hide links, and
// marked blocks.
func TestDocCheckers(t *testing.T) {
	slugs := []struct{ heading, want string }{
		{"Measured under chaos: `TestChaos`", "measured-under-chaos-testchaos"},
		{"Your own traffic (`--trace`)", "your-own-traffic---trace"},
		{"Passing traffic on Redis (2026-11-24)", "passing-traffic-on-redis-2026-11-24"},
		{"The `--rls-addr` server", "the---rls-addr-server"},
		{"Across regions (the global layer)", "across-regions-the-global-layer"},
		{"See [the model](x.md#y) *now*", "see-the-model-now"},
		{"snake_case and Diátaxis", "snake_case-and-diátaxis"},
		{"1. Start the server", "1-start-the-server"},
	}
	for _, c := range slugs {
		if got := headingSlug(c.heading); got != c.want {
			t.Errorf("headingSlug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
	page := "# A\n\n## B\n\n```md\n## C\n[x](hidden.md)\n```\n\n## B\n\n## B\n" +
		"See [y](y.md#b-1 \"title\") and `[z](z.md)` and ![i](i.png).\n\n[r]: ref.md\n" +
		"<!-- not run: a reason -->\n```sh\nexit 1\n```\n"
	anchors := pageAnchors(page)
	for _, a := range []string{"a", "b", "b-1", "b-2"} {
		if !anchors[a] {
			t.Errorf("pageAnchors: no #%s in %v", a, anchors)
		}
	}
	if anchors["c"] {
		t.Error("pageAnchors: a heading inside a fence counts")
	}
	var targets []string
	for _, l := range pageLinks(page) {
		targets = append(targets, l.target)
	}
	if got, want := strings.Join(targets, " "), "y.md#b-1 i.png ref.md"; got != want {
		t.Errorf("pageLinks = %q, want %q", got, want)
	}
	blocks, err := docBlocks(page)
	if err != nil || len(blocks) != 2 || blocks[0].lang != "md" || blocks[1].notRun != "a reason" || blocks[1].code != "exit 1\n" {
		t.Errorf("docBlocks = %+v, %v", blocks, err)
	}
}

// TestCitesOutside checks citesOutside on a page at docs/howto/x.md.
func TestCitesOutside(t *testing.T) {
	root := "/repo"
	page := filepath.Join(root, "docs", "howto", "x.md")
	names := map[string]bool{"README.md": true, "capacity.md": true}
	for _, tc := range []struct {
		name, text, want string
	}{
		{"a page of the repository", "see ../capacity.md and README.md", ""},
		{"the root, climbed to", "see ../../README.md", ""},
		{"above the root", "see ../../../elsewhere/notes", "../../../elsewhere"},
		{"a Markdown file nowhere in the repository", "as PLAN.md says", "PLAN.md"},
	} {
		if got := citesOutside(root, page, tc.text, names); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
