package docs

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCIStepsDocumented: development.md lists the steps of .ci/run, in
// their order, between <!-- ci-steps --> and <!-- /ci-steps -->; a step
// added, removed or renamed in the script fails here until the page says
// so.
func TestCIStepsDocumented(t *testing.T) {
	script, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, m := range regexp.MustCompile(`(?m)^step "([^"]+)"`).FindAllStringSubmatch(string(script), -1) {
		steps = append(steps, m[1])
	}
	if len(steps) < 5 {
		t.Fatalf(".ci/run has only %d steps: %q", len(steps), steps)
	}
	page, err := os.ReadFile("development.md")
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(page), "<!-- ci-steps -->")
	list, _, ok2 := strings.Cut(list, "<!-- /ci-steps -->")
	if !ok || !ok2 {
		t.Fatal("development.md has no list between <!-- ci-steps --> and <!-- /ci-steps -->")
	}
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^\d+\. (.+)$`).FindAllStringSubmatch(list, -1) {
		documented = append(documented, m[1])
	}
	if !slices.Equal(steps, documented) {
		t.Errorf("development.md lists the CI steps\n%q\nbut .ci/run runs\n%q", documented, steps)
	}
}
