package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestEveryThreatHasItsProof: every row of security.md's threat model
// names the test that proves it, or says it is open; every test the page
// names exists.
func TestEveryThreatHasItsProof(t *testing.T) {
	raw, err := os.ReadFile("security.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	start := strings.Index(text, "## Threat model")
	if start < 0 {
		t.Fatal("security.md has no section \"## Threat model\"")
	}
	rows := 0
	for line := range strings.SplitSeq(text[start:], "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if !strings.HasPrefix(line, "|") || len(cells) != 4 || cells[0] == "actor" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows++
		if !strings.Contains(cells[3], "Test") && !strings.Contains(line, "**open**") && !strings.Contains(line, "**Open**") {
			t.Errorf("the row of %q names no test and says not that it is open", cells[0])
		}
	}
	if rows < 8 {
		t.Errorf("the threat model has %d rows, want every actor", rows)
	}
	tests := map[string]bool{}
	for _, m := range regexp.MustCompile("`(Test[A-Za-z0-9_]+)`").FindAllStringSubmatch(text, -1) {
		tests[m[1]] = false
	}
	for name, found := range definedTests(t, tests, nil) {
		if !found {
			t.Errorf("security.md names %s, which no test file defines", name)
		}
	}
}
