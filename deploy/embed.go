// Package deploy holds the project's Kubernetes manifests (kustomize
// directories; deploy/default is the whole install). Its Go side embeds the
// CRDs and the webhook configuration, so that tools such as the local
// cluster install exactly what deploy/default does.
package deploy

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// PoolControllerLease is the name of the Lease the pool controller's
// replicas elect a leader with; rbac/pool-controller grants that Lease
// alone.
const PoolControllerLease = "nmstate-ippool-pool-controller"

//go:embed admission/allocation-state/*.yaml admission/node-bound/*.yaml admission/controller-nodes/*.yaml admission/upstream-handler/*.yaml
var companionAdmission embed.FS

// CompanionAdmissionPolicies returns the ValidatingAdmissionPolicies and
// their bindings that deploy/companion installs (allocation-state,
// node-bound, controller-nodes, upstream-handler), in that order, each
// policy before its binding. Where an install cannot carry them (the OLM
// bundle), the pool controller checks that the admin installed them
// (--require-admission-policies).
func CompanionAdmissionPolicies() ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, dir := range []string{"allocation-state", "node-bound", "controller-nodes", "upstream-handler"} {
		files, err := fs.Glob(companionAdmission, "admission/"+dir+"/*.yaml")
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if path.Base(f) == "kustomization.yaml" {
				continue
			}
			raw, err := companionAdmission.ReadFile(f)
			if err != nil {
				return nil, err
			}
			objs, err := decodeObjects(raw)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			out = append(out, objs...)
		}
	}
	return out, nil
}

// decodeObjects decodes a stream of YAML documents into objects, skipping
// empty ones.
func decodeObjects(raw []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(obj.Object) > 0 {
			out = append(out, &obj)
		}
	}
}

//go:embed crd/nmstate.io_*.yaml
var crds embed.FS

//go:embed webhook/validating_webhook.yaml
var validatingWebhook []byte

//go:embed self-allocate/status_webhook.yaml
var statusWebhook []byte

// SelfAllocateWebhook returns the webhook configuration deploy/self-allocate
// adds, which keeps a self-allocating handler to its own node's entries of
// a pool's status; callers that serve it elsewhere rewrite its client
// configuration, as for ValidatingWebhook.
func SelfAllocateWebhook() (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	var w admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(statusWebhook, &w); err != nil {
		return nil, fmt.Errorf("self-allocate/status_webhook.yaml: %w", err)
	}
	return &w, nil
}

// ValidatingWebhook returns the NodeIPPool webhook configuration of
// deploy/webhook. Its entries reach the webhook through the Service the
// install creates; a caller that serves it elsewhere (the local cluster,
// envtest) rewrites their client configuration.
func ValidatingWebhook() (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	var w admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(validatingWebhook, &w); err != nil {
		return nil, fmt.Errorf("webhook/validating_webhook.yaml: %w", err)
	}
	return &w, nil
}

// CRDs returns the CustomResourceDefinitions of deploy/crd.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := fs.Glob(crds, "crd/nmstate.io_*.yaml")
	if err != nil {
		return nil, err
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(files))
	for _, f := range files {
		raw, err := crds.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, &crd)
	}
	return out, nil
}

//go:embed alerts/rules.yaml
var alertRules []byte

// AlertRule is one alerting rule of deploy/alerts/rules.yaml.
type AlertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// AlertRules returns the alerting rules of deploy/alerts/rules.yaml, in
// their order.
func AlertRules() ([]AlertRule, error) {
	var file struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []AlertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(alertRules, &file); err != nil {
		return nil, fmt.Errorf("alerts/rules.yaml: %w", err)
	}
	var out []AlertRule
	for _, g := range file.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

// seriesName matches, in an expression, the names of the series the pool
// controller exports: its own, and controller-runtime's leader election
// status.
var seriesName = regexp.MustCompile(`\b(nmstate_ippool_[a-z_]+|leader_election_master_status)\b`)

// Series returns the names of the pool controller's series the rule
// reads, sorted, each once.
func (r AlertRule) Series() []string {
	names := seriesName.FindAllString(r.Expr, -1)
	slices.Sort(names)
	return slices.Compact(names)
}
