package envtest

import (
	"fmt"
	"strings"

	"github.com/onsi/ginkgo/v2"
)

// FailureLines is how many lines of a failure's message a spec's digest
// keeps: enough for an Expected/to equal pair of a few elements.
const FailureLines = 16

// SpecDigests collects why the specs of a Ginkgo suite failed, for the
// suite to print last, where a CI log cut to its end still shows it (and
// hack/failure-digest.sh finds it): each failed spec's text, location and
// the first lines of its failure.
type SpecDigests struct{ failures []string }

// Collect records the failed specs of a suite's report, the suite's own
// nodes among them (a failed BeforeSuite skips every spec, and its message
// is the only one that says why); call it from ReportAfterSuite.
func (d *SpecDigests) Collect(r ginkgo.Report) {
	for _, s := range r.SpecReports {
		d.add(s)
	}
}

// add records a spec's report if it failed.
func (d *SpecDigests) add(r ginkgo.SpecReport) {
	if !r.Failed() {
		return
	}
	name := r.LeafNodeText
	if name == "" {
		name = "[" + r.LeafNodeType.String() + "]"
	}
	msg := strings.Split(strings.TrimSpace(r.Failure.Message), "\n")
	d.failures = append(d.failures, fmt.Sprintf("- %s (%s)\n  %s", name, r.Failure.Location,
		strings.Join(msg[:min(len(msg), FailureLines)], "\n  ")))
}

// Print prints the digests under the heading hack/failure-digest.sh looks
// for; call it when RunSpecs reports a failure.
func (d *SpecDigests) Print() {
	fmt.Println("Why the specs failed:")
	for _, f := range d.failures {
		fmt.Println(f)
	}
}
