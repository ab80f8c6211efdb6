package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pages are the Markdown pages a user reads: the repository's top-level
// pages and every page of docs/.
func pages(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, glob := range []string{"../*.md", "*.md"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	if len(out) < 3 {
		t.Fatalf("found only %v: run the test from docs/", out)
	}
	return out
}

var (
	// link is an inline link, with or without a title, or the definition
	// of a reference-style link ([name]: target, alone on its line).
	link    = regexp.MustCompile(`\]\(<?([^)\s>]+)>?(?:\s+"[^"]*")?\)|(?m)^ {0,3}\[[^\]]+\]:[ \t]*<?([^\s>]+)>?(?:[ \t]+"[^"]*")?[ \t]*$`)
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	unslug  = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
)

// prose returns a Markdown page without its fenced code blocks: a line
// that starts with ``` opens a block, the next such line closes it.
func prose(text string) string {
	var out []string
	in := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if !in {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// anchors returns the anchors GitHub gives the headings of a Markdown
// page: lower case, punctuation dropped, spaces as hyphens.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(prose(text), -1) {
		s := strings.ToLower(strings.TrimSpace(m[1]))
		s = unslug.ReplaceAllString(s, "")
		out[strings.ReplaceAll(s, " ", "-")] = true
	}
	return out
}

// TestLinksResolve: every relative link of the README and of docs/
// (inline, with a title or not, or reference-style) names
// a file or directory of the repository, and a link to a heading
// (page.md#heading, or #heading on the same page) names a heading that
// page has. The README's sections moved into docs/ once; this keeps a
// moved section from leaving a dead link behind.
func TestLinksResolve(t *testing.T) {
	for _, page := range pages(t) {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(prose(string(raw)), -1) {
			target := m[1] + m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s links to %s, which does not exist", page, target)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			body, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(body))[anchor] {
				t.Errorf("%s links to %s, but %s has no heading #%s", page, target, file, anchor)
			}
		}
	}
}

// TestAnchorsAsGitHubMakesThem pins the anchor rule the link check relies
// on, so that a link it accepts is one a reader can follow.
func TestAnchorsAsGitHubMakesThem(t *testing.T) {
	got := anchors("## Install beside kubernetes-nmstate (OpenShift included)\n```\n# not a heading\n```\n### Gateway, DNS and reservations\n")
	for _, want := range []string{"install-beside-kubernetes-nmstate-openshift-included", "gateway-dns-and-reservations"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment in a code block was taken for a heading")
	}
}

// TestLinksAreFound pins what the link check reads: links with a title,
// reference-style definitions, and nothing inside a code block.
func TestLinksAreFound(t *testing.T) {
	page := "[a](install.md \"t\") and [b][r]\n\n[r]: modes.md#x\n[`T`]: prose, not a definition\n\n```sh\n[c](in-code.md)\n```\n[d](<last.md>)\n"
	var got []string
	for _, m := range link.FindAllStringSubmatch(prose(page), -1) {
		got = append(got, m[1]+m[2])
	}
	if want := []string{"install.md", "modes.md#x", "last.md"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("links found: %q, want %q", got, want)
	}
}
