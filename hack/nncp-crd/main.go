// Command nncp-crd completes the NodeNetworkConfigurationPolicy CRD that
// controller-gen generates from kubernetes-nmstate's v1 API types, with
// what those types carry no markers for. `make manifests` runs it on
// deploy/crd; `make verify` checks the result like any generated file.
//
// It serves nmstate.io/v1beta1 beside v1, as kubernetes-nmstate does, so
// that policies written for v1beta1 (its documentation's examples among
// them) apply unchanged: the two versions have the same schema, so the
// API server converts between them by rewriting apiVersion.
//
// It adds this project's admission rules, which the CRD of
// PooledNodeNetworkConfigurationPolicy (an NNCP's spec, companion mode)
// gets too, but for the v1beta1 version and upstream's status fields.
// The rules are CEL, checked by the API server:
//   - spec.capture is immutable (kubernetes-nmstate's rule): the
//     addresses a policy holds are recorded per capture;
//   - nodeSelector values are valid label values, and there are at most
//     128 of them (the bound keeps the rule's cost within the API
//     server's budget);
//   - the policy's name is a valid label value: it is the
//     nmstate.io/policy label of its enactments.
package main

import (
	"errors"
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"

	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/crdfile"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: nncp-crd <the NodeNetworkConfigurationPolicy CRD file>")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "nncp-crd:", err)
		os.Exit(1)
	}
}

// labelValue is the syntax of a label value (k8s.io/apimachinery's
// validation.IsValidLabelValue), less the length, which maxLength checks.
const labelValue = `^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`

// maxSelectorLabels bounds the labels of a nodeSelector.
const maxSelectorLabels = 128

func run(path string) error {
	crd, err := crdfile.Read(path)
	if err != nil {
		return err
	}
	kind := crd.Spec.Names.Kind
	if kind != "NodeNetworkConfigurationPolicy" && kind != "PooledNodeNetworkConfigurationPolicy" {
		return fmt.Errorf("%s holds the CRD of %s, not of NodeNetworkConfigurationPolicy or PooledNodeNetworkConfigurationPolicy", path, kind)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1" {
		return fmt.Errorf("%s: want the one version v1 that controller-gen generates", path)
	}
	v1 := &crd.Spec.Versions[0]
	if err := addSpecRules(v1.Schema.OpenAPIV3Schema); err != nil {
		return fmt.Errorf("version %s: %w", v1.Name, err)
	}
	if kind == "NodeNetworkConfigurationPolicy" {
		// A pooled policy carries its name rule as a marker, and has no
		// v1beta1 and no upstream status.
		v1.Schema.OpenAPIV3Schema.XValidations = apiextensionsv1.ValidationRules{{
			Rule: "size(self.metadata.name) <= 63",
			Message: "a policy's name must be 63 characters or less: it is the value of the nmstate.io/policy label " +
				"of the policy's enactments",
		}}
		if err := addUpstreamStatus(v1.Schema.OpenAPIV3Schema); err != nil {
			return fmt.Errorf("version %s: %w", v1.Name, err)
		}
		v1beta1 := *v1.DeepCopy()
		v1beta1.Name, v1beta1.Storage = "v1beta1", false
		crd.Spec.Versions = append(crd.Spec.Versions, v1beta1)
	}
	return crdfile.Write(path, crd)
}

// addUpstreamStatus adds the status fields today's kubernetes-nmstate
// handler writes that the API module this CRD is generated from predates,
// so that the API server prunes none of them: unavailableNodeCountMap (the
// unavailable nodes by policy generation; without it upstream's
// maxUnavailable never throttles).
func addUpstreamStatus(root *apiextensionsv1.JSONSchemaProps) error {
	status, ok := root.Properties["status"]
	if !ok {
		return errors.New("no status in the schema")
	}
	if _, ok := status.Properties["unavailableNodeCountMap"]; !ok {
		status.Properties["unavailableNodeCountMap"] = apiextensionsv1.JSONSchemaProps{
			Description: "UnavailableNodeCountMap is the number of potentially unavailable nodes processing the policy, " +
				"by policy generation: written by kubernetes-nmstate's handler, kept so that it is not pruned.",
			Type: "object",
			AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true,
				Schema: &apiextensionsv1.JSONSchemaProps{Type: "integer"}},
		}
	}
	root.Properties["status"] = status
	return nil
}

// addSpecRules adds the rules of an NNCP's spec, which a pooled policy's
// spec is too.
func addSpecRules(root *apiextensionsv1.JSONSchemaProps) error {
	if root == nil {
		return errors.New("no schema")
	}
	spec, ok := root.Properties["spec"]
	if !ok {
		return errors.New("no spec in the schema")
	}
	spec.XValidations = apiextensionsv1.ValidationRules{{
		Rule:      "has(self.capture) == has(oldSelf.capture) && (!has(self.capture) || self.capture == oldSelf.capture)",
		Message:   "spec.capture is immutable: delete the policy and create it again to change its captures",
		FieldPath: ".capture",
		Reason:    ptr.To(apiextensionsv1.FieldValueForbidden),
	}}
	selector, ok := spec.Properties["nodeSelector"]
	if !ok || selector.AdditionalProperties == nil || selector.AdditionalProperties.Schema == nil {
		return errors.New("no nodeSelector map in the spec")
	}
	// A bound on the entries keeps the rule's estimated cost within the
	// API server's budget; no selector needs more labels than this.
	selector.MaxProperties = ptr.To[int64](maxSelectorLabels)
	value := selector.AdditionalProperties.Schema
	value.MaxLength = ptr.To[int64](63)
	value.XValidations = apiextensionsv1.ValidationRules{{
		Rule: "self.matches('" + labelValue + "')",
		Message: "a nodeSelector value must be a valid label value: empty, or alphanumeric characters, '-', '_' and '.', " +
			"beginning and ending with an alphanumeric character",
	}}
	spec.Properties["nodeSelector"] = selector
	root.Properties["spec"] = spec
	return nil
}
