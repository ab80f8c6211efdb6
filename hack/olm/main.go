// Command olm writes the OLM bundle of companion mode (deploy/olm/bundle)
// and validates it with operator-framework's own code.
//
//	olm generate [-kustomize BIN] [-repo DIR] [-out DIR] [-version 0.1.0]
//
// writes the bundle from kustomize build of deploy/companion, with
// deploy/olm/csv.yaml as the hand-written part of its
// ClusterServiceVersion and deploy/olm/checker_role.yaml added to its
// permissions; make manifests runs it, make verify fails when its output
// is stale.
//
//	olm validate [-k8s-version 1.34] [-strict] DIR
//
// validates a registry+v1 bundle (a directory of manifests/ and
// metadata/) with operator-framework's own validation, the
// code operator-sdk bundle validate and OperatorHub's pipelines run: the
// bundle (owned CRDs, service accounts, size), its ClusterServiceVersion
// and CRDs, the objects beside them, OperatorHub's metadata (categories,
// capabilities, icons, links, maintainers), the good practices, and the
// APIs that the given Kubernetes version no longer serves.
//
// Every error and warning is printed, one per line; an error fails it,
// and so does a warning with -strict.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: olm generate|validate ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "generate":
		if err := generate(os.Args[2:], os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "olm generate: %v\n", err)
			os.Exit(1)
		}
	case "validate":
		os.Exit(validate(os.Args[2:], os.Stdout, os.Stderr))
	default:
		fmt.Fprintf(os.Stderr, "olm: unknown command %q: generate or validate\n", os.Args[1])
		os.Exit(2)
	}
}

func validate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	k8sVersion := fs.String("k8s-version", "", "the Kubernetes version the bundle must install on (its removed APIs are errors)")
	strict := fs.Bool("strict", false, "fail on warnings too")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: olm validate [-k8s-version 1.34] [-strict] DIR")
		return 2
	}
	bundle, err := manifests.GetBundleFromDir(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "olm validate: load the bundle: %v\n", err)
		return 1
	}
	validators := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCategoriesValidator,
		validation.StandardCapabilitiesValidator,
		validation.ObjectValidator,
		validation.GoodPracticesValidator,
		validation.AlphaDeprecatedAPIsValidator,
	)
	objs := bundle.ObjectsToValidate()
	if *k8sVersion != "" {
		objs = append(objs, map[string]string{"k8s-version": *k8sVersion})
	}
	var nerrs, nwarns int
	for _, result := range validators.Validate(objs...) {
		nerrs += report(stdout, "error", result.Errors)
		nwarns += report(stdout, "warning", result.Warnings)
	}
	fmt.Fprintf(stdout, "bundle %s (%s): %d errors, %d warnings\n", bundle.Name, bundle.CSV.GetName(), nerrs, nwarns)
	if nerrs > 0 || (*strict && nwarns > 0) {
		return 1
	}
	return 0
}

// report prints each finding on a line of its own and returns how many.
func report(w io.Writer, level string, found []errors.Error) int {
	for _, e := range found {
		fmt.Fprintf(w, "%s: %s\n", level, e.Error())
	}
	return len(found)
}
