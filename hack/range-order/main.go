// Command range-order completes the NodeIPPool CRD that controller-gen
// generates from api/v1 with the two rules that refuse a range whose
// start comes after its end, one per address family. `make manifests`
// runs it on deploy/crd; `make verify` checks the result like any
// generated file, and api/v1's TestAdmissionOrdersStartAndEnd checks the
// rules on a real API server against Go's ordering of random addresses.
//
// The rules are generated because no marker can hold them readably. CEL
// has no ordering of IP addresses, so a rule compares start and end bit
// by bit: start is before end when, at some bit position p, both agree
// on their first p bits, differ at bit p, and start's bit p is 0. CEL's
// IP library can say each of these with prefixes of start:
//
//   - "agree on the first p bits":  cidr(start/p) contains end;
//   - "differ at bit p":            cidr(start/(p+1)) does not contain end;
//   - "start's bit p is 0":         start/(p+1) contains the network
//     address of start/p (that network address has bit p cleared, so it
//     shares start's first p+1 bits only when start's bit p is 0).
//
// The positions are unrolled (32 terms for IPv4, 128 for IPv6) rather than
// written as a comprehension over a list of positions, because the API
// server's cost estimator takes the elements of a list, and string(int),
// for strings of unbounded size, and refuses such a rule as too costly.
package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/crdfile"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: range-order <the NodeIPPool CRD file>")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "range-order:", err)
		os.Exit(1)
	}
}

// guard is what a rule assumes before it compares: both addresses set,
// valid and of the family; equal addresses are in order. The other rules
// of the range report what this one lets through.
const guard = "!has(self.start) || !has(self.end) || !isIP(self.start) || !isIP(self.end) || " +
	"ip(self.start).family() != %[1]d || ip(self.end).family() != %[1]d || ip(self.start) == ip(self.end)"

// beforeAt is the test at bit position p, the three parts of the package
// comment in their order.
func beforeAt(p int) string {
	prefix := func(bits int) string { return fmt.Sprintf("cidr(self.start + '/%d')", bits) }
	return fmt.Sprintf("(%s.containsIP(self.end) && !%s.containsIP(self.end) && %s.containsIP(%s.masked().ip()))",
		prefix(p), prefix(p+1), prefix(p+1), prefix(p))
}

// swap is the message of both rules.
const swap = "'start ' + self.start + ' is after end ' + self.end + ': swap them'"

// startBeforeEnd is the rule of one address family of the given width.
func startBeforeEnd(family, bits int) apiextensionsv1.ValidationRule {
	terms := []string{fmt.Sprintf(guard, family)}
	for p := range bits {
		terms = append(terms, beforeAt(p))
	}
	return apiextensionsv1.ValidationRule{
		Rule:              strings.Join(terms, " || "),
		MessageExpression: swap,
	}
}

func run(path string) error {
	crd, err := crdfile.Read(path)
	if err != nil {
		return err
	}
	if kind := crd.Spec.Names.Kind; kind != "NodeIPPool" {
		return fmt.Errorf("%s holds the CRD of %s, not of NodeIPPool", path, kind)
	}
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if err := addRules(v.Schema); err != nil {
			return fmt.Errorf("version %s: %w", v.Name, err)
		}
	}
	return crdfile.Write(path, crd)
}

// addRules adds the rules to spec.range, once: a rule of this command
// already there (it ran on this file before) is replaced, not repeated.
// Its rules are known by their message; make manifests starts from a
// fresh controller-gen output anyway.
func addRules(schema *apiextensionsv1.CustomResourceValidation) error {
	if schema == nil || schema.OpenAPIV3Schema == nil {
		return errors.New("no schema")
	}
	spec, ok := schema.OpenAPIV3Schema.Properties["spec"]
	if !ok {
		return errors.New("no spec in the schema")
	}
	rng, ok := spec.Properties["range"]
	if !ok {
		return errors.New("no spec.range in the schema")
	}
	rng.XValidations = slices.DeleteFunc(rng.XValidations, func(old apiextensionsv1.ValidationRule) bool {
		return old.MessageExpression == swap
	})
	rng.XValidations = append(rng.XValidations, startBeforeEnd(4, 32), startBeforeEnd(6, 128))
	spec.Properties["range"] = rng
	schema.OpenAPIV3Schema.Properties["spec"] = spec
	return nil
}
