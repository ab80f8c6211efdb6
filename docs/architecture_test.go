package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestPackageTableIsComplete: the table of packages in architecture.md
// (between <!-- packages --> and <!-- /packages -->) names every package
// of the module, once, and nothing that is not in the repository. A
// package added, moved or removed fails here until the table says where
// it belongs.
func TestPackageTableIsComplete(t *testing.T) {
	raw, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	start, end := strings.Index(text, "<!-- packages -->"), strings.Index(text, "<!-- /packages -->")
	if start < 0 || end < start {
		t.Fatal("architecture.md has no table between <!-- packages --> and <!-- /packages -->")
	}
	named := map[string]int{}
	path := regexp.MustCompile("`([a-z0-9/_.-]+)`")
	for line := range strings.SplitSeq(text[start:end], "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		for _, m := range path.FindAllStringSubmatch(first, -1) {
			named[strings.TrimSuffix(m[1], "/")]++
		}
	}
	if len(named) == 0 {
		t.Fatal("the table of packages in architecture.md is empty")
	}
	packages := modulePackages(t)
	for _, p := range packages {
		switch named[p] {
		case 0:
			t.Errorf("package %s is not in the table of packages of architecture.md: say what it holds and where it belongs", p)
		case 1:
		default:
			t.Errorf("package %s is in the table of packages of architecture.md %d times", p, named[p])
		}
	}
	for p := range named {
		if !slices.Contains(packages, p) {
			t.Errorf("the table of packages of architecture.md names %s, which is not a package of the module", p)
		}
	}
}

// modulePackages lists the directories of the root module that hold Go
// files, relative to the repository's root: not bin/ or dist/ (built
// output), testdata, or the tool modules of hack/ (each with its own
// go.mod).
func modulePackages(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() {
			name := d.Name()
			top := rel == name
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || top && (name == "bin" || name == "dist")) {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && rel != filepath.Base(rel) {
			dir := filepath.ToSlash(filepath.Dir(rel))
			if !slices.Contains(out, dir) {
				out = append(out, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found only %d packages: run the test from docs/", len(out))
	}
	return out
}
