// Package docs holds the project's pages. Its tests keep protocol.md and
// security.md honest, every link of the README and the pages resolvable,
// and the package table of architecture.md complete.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryNeverIsTested: every paragraph of protocol.md that says
// "never" names a test in brackets, and every test the page names exists;
// a subtest it names (TestName/Case) is a case its test's file names in
// quotes.
func TestEveryNeverIsTested(t *testing.T) {
	raw, err := os.ReadFile("protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`(Test[A-Za-z0-9_]+)(?:/([A-Za-z0-9_-]+))?`")
	never := regexp.MustCompile(`(?i)\bnever\b`)
	tests := map[string]bool{}
	for i, para := range strings.Split(string(raw), "\n\n") {
		if i == 0 || !never.MatchString(para) || strings.Contains(para, "*never*") {
			continue
		}
		if !strings.Contains(para, "[`Test") {
			t.Errorf("a paragraph says never but names no test:\n%s", para)
		}
	}
	cases := map[string][]string{}
	for _, m := range named.FindAllStringSubmatch(string(raw), -1) {
		tests[m[1]] = false
		if m[2] != "" {
			cases[m[1]] = append(cases[m[1]], m[2])
		}
	}
	for name, found := range definedTests(t, tests, cases) {
		if !found {
			t.Errorf("protocol.md names %s, or a case of it, which no test file defines", name)
		}
	}
}

// definedTests reports, for each test name in tests, whether a test file
// of the repository defines it, and, if cases names some of its cases,
// quotes every one of them in its package (a table's "name").
func definedTests(t *testing.T, tests map[string]bool, cases map[string][]string) map[string]bool {
	t.Helper()
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for name := range tests {
			if strings.Contains(string(src), "func "+name+"(") && quotesAll(filepath.Dir(path), cases[name]) {
				tests[name] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tests
}

// quotesAll reports whether the test files of dir quote each of names.
func quotesAll(dir string, names []string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	var all strings.Builder
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		all.Write(src)
	}
	for _, n := range names {
		if !strings.Contains(all.String(), `"`+n+`"`) {
			return false
		}
	}
	return true
}
