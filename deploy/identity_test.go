package deploy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// installs are every install the project ships or documents, with the
// overlay of an admin who puts it into a namespace and under a name prefix
// of their own (deploy/testdata/infra-net).
var installs = []string{"default", "self-allocate", "local", "companion", "testdata/infra-net"}

// identityLabel is the label that makes a ClusterRoleBinding the
// parameter of an admission policy: its subjects are who the policy means.
const identityLabel = "nmstate.io/ippool-identity"

// TestRenderedIdentitiesAgree renders every install and checks that what
// admission relies on names what the install creates, so that no overlay
// can leave a policy matching nobody (it would fail open):
//
//   - every ValidatingAdmissionPolicyBinding names a rendered policy, which
//     learns whom it concerns from its parameter (never from a name
//     written into its CEL), and its selector selects exactly one rendered
//     ClusterRoleBinding;
//   - the binding labelled handler names the handler DaemonSet's service
//     account, and the one labelled allocation-writers the pool
//     controller's, each in its workload's namespace;
//   - every binding's service-account subject is a rendered
//     ServiceAccount;
//   - the webhook calls a rendered Service, and the certificate whose CA is
//     injected into it is rendered and names that Service.
func TestRenderedIdentitiesAgree(t *testing.T) {
	for _, dir := range installs {
		t.Run(dir, func(t *testing.T) {
			objs := render(t, dir)
			for _, problem := range identityProblems(t, objs) {
				t.Errorf("deploy/%s: %s", dir, problem)
			}
		})
	}
}

// identityProblems returns what disagrees among objs, as sentences.
func identityProblems(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	var out []string
	accounts := map[string]bool{}
	bindings := map[string]*rbacv1.ClusterRoleBinding{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount":
			accounts[o.GetNamespace()+"/"+o.GetName()] = true
		case "ClusterRoleBinding":
			bindings[o.GetName()] = convert[rbacv1.ClusterRoleBinding](t, o)
		}
	}
	for _, o := range objs {
		if o.GetKind() == "RoleBinding" || o.GetKind() == "ClusterRoleBinding" {
			b := convert[rbacv1.RoleBinding](t, o)
			for _, s := range b.Subjects {
				if s.Kind == "ServiceAccount" && !accounts[s.Namespace+"/"+s.Name] {
					out = append(out, fmt.Sprintf("%s %s binds ServiceAccount %s/%s, which the install does not create", o.GetKind(), o.GetName(), s.Namespace, s.Name))
				}
			}
		}
	}
	out = append(out, policyProblems(t, objs, bindings)...)
	out = append(out, workloadProblems(objs, bindings)...)
	return append(out, webhookProblems(t, objs)...)
}

// policyProblems: every policy binding names a rendered policy and
// selects one rendered ClusterRoleBinding as its parameter.
func policyProblems(t *testing.T, objs []*unstructured.Unstructured, bindings map[string]*rbacv1.ClusterRoleBinding) []string {
	var out []string
	policies := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	for _, o := range objs {
		if o.GetKind() == "ValidatingAdmissionPolicy" {
			policies[o.GetName()] = convert[admissionregistrationv1.ValidatingAdmissionPolicy](t, o)
		}
	}
	for _, o := range objs {
		if o.GetKind() != "ValidatingAdmissionPolicyBinding" {
			continue
		}
		b := convert[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, o)
		p, ok := policies[b.Spec.PolicyName]
		if !ok {
			out = append(out, fmt.Sprintf("ValidatingAdmissionPolicyBinding %s names policy %s, which the install does not create: the policy would bind nothing", b.Name, b.Spec.PolicyName))
			continue
		}
		if upstreamBinding(p, b) {
			continue // kubernetes-nmstate's own binding: its operator makes it, not this install
		}
		if p.Spec.ParamKind == nil || p.Spec.ParamKind.Kind != "ClusterRoleBinding" || b.Spec.ParamRef == nil || b.Spec.ParamRef.Selector == nil {
			out = append(out, fmt.Sprintf("policy %s takes %v as its parameter, binding %s selects %+v: want a ClusterRoleBinding chosen by label", p.Name, p.Spec.ParamKind, b.Name, b.Spec.ParamRef))
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.ParamRef.Selector)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		var selected []string
		for name, crb := range bindings {
			if sel.Matches(labels.Set(crb.Labels)) {
				selected = append(selected, name)
			}
		}
		if len(selected) != 1 {
			out = append(out, fmt.Sprintf("binding %s selects the ClusterRoleBindings %v (%s), want exactly one", b.Name, selected, sel))
		}
	}
	return out
}

// upstreamBindingName is the ClusterRoleBinding kubernetes-nmstate's
// operator makes for its handler.
const upstreamBindingName = "nmstate-handler"

// upstreamBinding reports whether policy binding b takes, by name,
// kubernetes-nmstate's handler binding as its parameter: the one policy
// whose identity comes from kubernetes-nmstate's install, not this one
// (deploy/admission/upstream-handler). It means nobody when that binding
// is missing, and refuses only what that handler never does.
func upstreamBinding(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) bool {
	return p.Name == "nmstate-ippool-upstream-handler" && p.Spec.ParamKind != nil && p.Spec.ParamKind.Kind == "ClusterRoleBinding" &&
		b.Spec.ParamRef != nil && b.Spec.ParamRef.Name == upstreamBindingName && b.Spec.ParamRef.Selector == nil
}

// workloadProblems: the handler's and the pool controller's service
// accounts are the subjects of the bindings labelled for them.
func workloadProblems(objs []*unstructured.Unstructured, bindings map[string]*rbacv1.ClusterRoleBinding) []string {
	var out []string
	byLabel := map[string]*rbacv1.ClusterRoleBinding{}
	for _, b := range bindings {
		if v := b.Labels[identityLabel]; v != "" {
			byLabel[v] = b
		}
	}
	for _, o := range objs {
		var want string
		switch {
		case o.GetKind() == "DaemonSet" && strings.HasSuffix(o.GetName(), "nmstate-ippool-handler"):
			want = "handler"
		case o.GetKind() == "Deployment" && strings.HasSuffix(o.GetName(), "nmstate-ippool-pool-controller"):
			want = "allocation-writers"
		default:
			continue
		}
		sa, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "serviceAccountName")
		subject := rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: o.GetNamespace()}
		b := byLabel[want]
		if b == nil || !slices.Contains(b.Subjects, subject) {
			out = append(out, fmt.Sprintf("%s %s/%s runs as ServiceAccount %s/%s, which no ClusterRoleBinding labelled %s=%s binds: admission would not know it",
				o.GetKind(), o.GetNamespace(), o.GetName(), subject.Namespace, sa, identityLabel, want))
		}
	}
	return out
}

// webhookProblems: each webhook calls a rendered Service, and the
// certificate whose CA is injected is rendered and valid for that Service.
func webhookProblems(t *testing.T, objs []*unstructured.Unstructured) []string {
	var out []string
	rendered := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		rendered[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = o
	}
	for _, o := range objs {
		if o.GetKind() != "ValidatingWebhookConfiguration" {
			continue
		}
		w := convert[admissionregistrationv1.ValidatingWebhookConfiguration](t, o)
		cert := rendered["Certificate/"+w.Annotations["cert-manager.io/inject-ca-from"]]
		if cert == nil {
			out = append(out, fmt.Sprintf("webhook configuration %s asks cert-manager for the CA of Certificate %q, which the install does not create", w.Name, w.Annotations["cert-manager.io/inject-ca-from"]))
		}
		for _, h := range w.Webhooks {
			s := h.ClientConfig.Service
			if s == nil || rendered["Service/"+s.Namespace+"/"+s.Name] == nil {
				out = append(out, fmt.Sprintf("webhook %s calls %+v, which the install does not create", h.Name, s))
				continue
			}
			if cert == nil {
				continue
			}
			names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
			if dns := s.Name + "." + s.Namespace + ".svc"; !slices.Contains(names, dns) {
				out = append(out, fmt.Sprintf("webhook %s calls %s, but Certificate %s is for %v: the API server would refuse its TLS", h.Name, dns, cert.GetName(), names))
			}
		}
	}
	return out
}

// convert converts a rendered object to T.
func convert[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &out); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return &out
}
