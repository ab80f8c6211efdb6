// Command helmchart writes the static templates of the Helm chart
// (deploy/helm/nmstate-ippool/templates/zz_generated.*.yaml) from the
// kustomize installs, so that the chart and deploy/ are one install and
// never two copies kept in step by hand. `make manifests` runs it;
// `make verify` fails when its output is stale.
//
// It renders deploy/default (handler mode), deploy/companion (companion
// mode) and deploy/alerts, and writes every object but the workloads and
// the Namespace, which the chart's own templates write (they carry the
// chart's values: images, scheduling, resources):
//
//   - an object both modes render alike is written once; one that only one
//     mode renders, or that the modes render differently, is written under
//     that mode's condition;
//   - the install namespace becomes the release's namespace;
//   - the webhook's CA (cert-manager's annotation, OpenShift's service CA,
//     or a caBundle the admin gives) and the Service's serving-certificate
//     annotation come from the chart's values;
//   - CRDs are kept when the release is uninstalled
//     (helm.sh/resource-policy: keep): deleting a CRD deletes every pool,
//     policy and record;
//   - the NetworkPolicy, the cert-manager objects, the PrometheusRule and
//     the ServiceMonitor are written under their toggles.
//
// A kind it has no place for is an error: a new kind in deploy/ is a
// decision for the chart, not something to drop silently.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// installNamespace is the namespace deploy/ installs into.
const installNamespace = "nmstate-ippool"

// A file is one generated template: the objects of some kinds, each
// under the condition that selects it, all under the file's own.
type file struct {
	name  string   // under templates/, without zz_generated. and .yaml
	kinds []string // the kinds it holds
	when  string   // a template condition for the whole file, or ""
}

var files = []file{
	{name: "crds", kinds: []string{"CustomResourceDefinition"}},
	{name: "rbac", kinds: []string{"ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}},
	{name: "admission", kinds: []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}},
	{name: "webhook", kinds: []string{"ValidatingWebhookConfiguration", "Service"}},
	{name: "network-policy", kinds: []string{"NetworkPolicy"}, when: ".Values.networkPolicy.enabled"},
	{name: "certificate", kinds: []string{"Issuer", "Certificate"}, when: `eq .Values.webhook.certificate "cert-manager"`},
	{name: "prometheusrule", kinds: []string{"PrometheusRule"}, when: ".Values.alerts.prometheusRule"},
	{name: "servicemonitor", kinds: []string{"ServiceMonitor"}, when: ".Values.metrics.serviceMonitor"},
}

// handWritten are the kinds the chart's own templates write.
var handWritten = []string{"Namespace", "Deployment", "DaemonSet"}

// Tokens stand in the marshalled objects for what the chart's values
// decide; expand replaces each with template text.
const (
	tokenNamespace         = "__RELEASE_NAMESPACE__"
	tokenWebhookAnnotation = "__WEBHOOK_ANNOTATIONS__"
	tokenServiceAnnotation = "__SERVICE_ANNOTATIONS__"
	tokenCABundle          = "__CA_BUNDLE__"
)

func main() {
	kustomize := flag.String("kustomize", "bin/kustomize", "the kustomize binary")
	out := flag.String("out", "deploy/helm/nmstate-ippool/templates", "the chart's templates directory")
	flag.Parse()
	if err := run(*kustomize, *out); err != nil {
		fmt.Fprintln(os.Stderr, "helmchart:", err)
		os.Exit(1)
	}
}

func run(kustomize, out string) error {
	handler, err := build(kustomize, "deploy/default")
	if err != nil {
		return err
	}
	companion, err := build(kustomize, "deploy/companion")
	if err != nil {
		return err
	}
	alerts, err := build(kustomize, "deploy/alerts")
	if err != nil {
		return err
	}
	blocks, err := split(handler, companion)
	if err != nil {
		return err
	}
	for _, o := range alerts {
		blocks = append(blocks, block{obj: o})
	}
	for _, f := range files {
		text, err := f.render(blocks)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "zz_generated."+f.name+".yaml"), text, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// build renders a kustomize directory into its objects.
func build(kustomize, dir string) ([]*unstructured.Unstructured, error) {
	cmd := exec.Command(kustomize, "build", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w\n%s", dir, err, stderr.Bytes())
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var objs []*unstructured.Unstructured
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, &u)
		}
	}
}

// A block is one object and the mode it is written for ("" for both).
type block struct {
	obj  *unstructured.Unstructured
	mode string
}

// split pairs the two modes' objects: one block for an object both render
// alike, a block per mode otherwise, in handler mode's order then
// companion mode's.
func split(handler, companion []*unstructured.Unstructured) ([]block, error) {
	key := func(o *unstructured.Unstructured) string {
		return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
	}
	inCompanion := map[string]*unstructured.Unstructured{}
	for _, o := range companion {
		inCompanion[key(o)] = o
	}
	var out []block
	seen := map[string]bool{}
	for _, o := range handler {
		if slices.Contains(handWritten, o.GetKind()) {
			continue
		}
		seen[key(o)] = true
		c, ok := inCompanion[key(o)]
		switch {
		case ok && equality.Semantic.DeepEqual(o.Object, c.Object):
			out = append(out, block{obj: o})
		case ok:
			out = append(out, block{obj: o, mode: "handler"}, block{obj: c, mode: "companion"})
		default:
			out = append(out, block{obj: o, mode: "handler"})
		}
	}
	for _, o := range companion {
		if !seen[key(o)] && !slices.Contains(handWritten, o.GetKind()) {
			out = append(out, block{obj: o, mode: "companion"})
		}
	}
	for _, b := range out {
		if !slices.ContainsFunc(files, func(f file) bool { return slices.Contains(f.kinds, b.obj.GetKind()) }) {
			return nil, fmt.Errorf("%s %s: no template of the chart holds this kind; add it to hack/helmchart's files or handWritten", b.obj.GetKind(), b.obj.GetName())
		}
	}
	return out, nil
}

// render writes the file's blocks as a template.
func (f file) render(blocks []block) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Generated by hack/helmchart from deploy/default, deploy/companion and\n" +
		"# deploy/alerts (kustomize build): do not edit. Change deploy/ and run\n" +
		"# `make manifests`.\n")
	if f.when != "" {
		fmt.Fprintf(&b, "{{- if %s }}\n", f.when)
	}
	for _, bl := range blocks {
		if !slices.Contains(f.kinds, bl.obj.GetKind()) {
			continue
		}
		text, err := marshal(bl.obj)
		if err != nil {
			return nil, err
		}
		if bl.mode != "" {
			fmt.Fprintf(&b, "{{- if eq .Values.mode %q }}\n", bl.mode)
		}
		b.WriteString("---\n")
		b.Write(text)
		if bl.mode != "" {
			b.WriteString("{{- end }}\n")
		}
	}
	if f.when != "" {
		b.WriteString("{{- end }}\n")
	}
	return b.Bytes(), nil
}

// marshal writes one object as template text: the chart's values in
// place of the install's namespace and the webhook's CA, braces escaped.
func marshal(in *unstructured.Unstructured) ([]byte, error) {
	o := in.DeepCopy()
	rewriteNamespace(o.Object)
	switch o.GetKind() {
	case "CustomResourceDefinition":
		a := o.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a["helm.sh/resource-policy"] = "keep"
		o.SetAnnotations(a)
	case "ValidatingWebhookConfiguration":
		if err := tokenizeWebhook(o); err != nil {
			return nil, err
		}
	case "Service":
		if o.GetName() == "nmstate-ippool-webhook" {
			if len(o.GetAnnotations()) > 0 {
				return nil, fmt.Errorf("the Service %s has annotations the chart would lose: %v", o.GetName(), o.GetAnnotations())
			}
			if err := unstructured.SetNestedField(o.Object, tokenServiceAnnotation, "metadata", "annotations"); err != nil {
				return nil, err
			}
		}
	}
	raw, err := yaml.Marshal(o.Object)
	if err != nil {
		return nil, err
	}
	text := strings.NewReplacer("{{", "{{`{{`}}", "}}", "{{`}}`}}").Replace(string(raw))
	return expand(text)
}

// rewriteNamespace puts the release's namespace token wherever the
// install names its namespace: namespace fields, the webhook's DNS names
// and cert-manager's CA annotation.
func rewriteNamespace(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok {
				if k == "namespace" && s == installNamespace {
					v[k] = tokenNamespace
				} else {
					v[k] = rewriteNamespaceString(s)
				}
				continue
			}
			rewriteNamespace(x)
		}
	case []any:
		for i, x := range v {
			if s, ok := x.(string); ok {
				v[i] = rewriteNamespaceString(s)
				continue
			}
			rewriteNamespace(x)
		}
	}
}

func rewriteNamespaceString(s string) string {
	s = strings.ReplaceAll(s, "."+installNamespace+".svc", "."+tokenNamespace+".svc")
	return strings.ReplaceAll(s, installNamespace+"/"+installNamespace+"-", tokenNamespace+"/"+installNamespace+"-")
}

// tokenizeWebhook replaces the webhook configuration's cert-manager
// annotation, and each entry's absent caBundle, with tokens.
func tokenizeWebhook(o *unstructured.Unstructured) error {
	a := o.GetAnnotations()
	if _, ok := a["cert-manager.io/inject-ca-from"]; !ok || len(a) != 1 {
		return fmt.Errorf("ValidatingWebhookConfiguration %s: want exactly cert-manager's inject-ca-from annotation, have %v", o.GetName(), a)
	}
	if err := unstructured.SetNestedField(o.Object, tokenWebhookAnnotation, "metadata", "annotations"); err != nil {
		return err
	}
	hooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
	if err != nil {
		return err
	}
	for _, h := range hooks {
		cc, ok := h.(map[string]any)["clientConfig"].(map[string]any)
		if !ok {
			return fmt.Errorf("ValidatingWebhookConfiguration %s: an entry without clientConfig", o.GetName())
		}
		if _, has := cc["caBundle"]; has {
			return fmt.Errorf("ValidatingWebhookConfiguration %s: a caBundle in deploy/ would override the chart's", o.GetName())
		}
		cc["caBundle"] = tokenCABundle
	}
	return unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
}

// tokenLine is a line whose value is a token that stands for a whole
// field (not an inline value).
var tokenLine = regexp.MustCompile(`(?m)^( *)(\w+): (__[A-Z_]+__)$`)

// expand replaces the tokens with template text, indented where they
// stood.
func expand(text string) ([]byte, error) {
	var bad error
	text = tokenLine.ReplaceAllStringFunc(text, func(line string) string {
		m := tokenLine.FindStringSubmatch(line)
		indent, field, token := m[1], m[2], m[3]
		var helper string
		switch token {
		case tokenWebhookAnnotation:
			helper = "nmstate-ippool.webhookAnnotations"
		case tokenServiceAnnotation:
			helper = "nmstate-ippool.webhookServiceAnnotations"
		case tokenCABundle:
			return fmt.Sprintf("%s{{- with .Values.webhook.caBundle }}\n%s%s: {{ . }}\n%s{{- end }}", indent, indent, field, indent)
		case tokenNamespace:
			return line // inline, below
		default:
			bad = fmt.Errorf("unknown token %s", token)
			return line
		}
		return fmt.Sprintf("%s{{- with include %q . | trim }}\n%s%s:\n%s  {{- . | nindent %d }}\n%s{{- end }}",
			indent, helper, indent, field, indent, len(indent)+2, indent)
	})
	if bad != nil {
		return nil, bad
	}
	text = strings.ReplaceAll(text, tokenNamespace, "{{ .Release.Namespace }}")
	if strings.Contains(text, "__") && regexp.MustCompile(`__[A-Z_]+__`).MatchString(text) {
		return nil, fmt.Errorf("a token was left in the output:\n%s", text)
	}
	return []byte(text), nil
}
