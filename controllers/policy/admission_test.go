package policy_test

import (
	"strings"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// TestAdmission checks the rules of the NodeNetworkConfigurationPolicy
// CRD this project ships, against the real API server: an invalid policy
// is refused with a message that says what to do, and nothing changes.
func TestAdmission(t *testing.T) {
	RegisterTestingT(t)
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "admission"}}
	p.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/worker": ""}
	p.Spec.Capture = map[string]string{"addr": "ippool.traffic.allocate"}
	p.Spec.DesiredState = shared.NewState("interfaces: []\n")
	Expect(k.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, p) })

	update := func(change func(*nmstatev1.NodeNetworkConfigurationPolicy)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var cur nmstatev1.NodeNetworkConfigurationPolicy
			if err := k.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
				return err
			}
			change(&cur)
			return k.Update(ctx, &cur)
		})
	}
	immutable := "spec.capture: Forbidden: spec.capture is immutable: delete the policy and create it again to change its captures"
	for name, change := range map[string]func(*nmstatev1.NodeNetworkConfigurationPolicy){
		"changed": func(p *nmstatev1.NodeNetworkConfigurationPolicy) { p.Spec.Capture["addr"] = "ippool.other.allocate" },
		"added":   func(p *nmstatev1.NodeNetworkConfigurationPolicy) { p.Spec.Capture["more"] = "ippool.traffic.allocate" },
		"removed": func(p *nmstatev1.NodeNetworkConfigurationPolicy) { p.Spec.Capture = nil },
		"replaced": func(p *nmstatev1.NodeNetworkConfigurationPolicy) {
			p.Spec.Capture = map[string]string{"x": "ippool.t.allocate"}
		},
	} {
		err := update(change)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "capture %s: %v", name, err)
		Expect(err.Error()).To(ContainSubstring(immutable), "capture %s", name)
	}
	// The rest of the spec may change.
	Expect(update(func(p *nmstatev1.NodeNetworkConfigurationPolicy) {
		p.Spec.DesiredState = shared.NewState("interfaces:\n- name: eth1\n  state: up\n")
		p.Spec.NodeSelector = map[string]string{"role": "edge"}
	})).To(Succeed())
	var cur nmstatev1.NodeNetworkConfigurationPolicy
	Expect(k.Get(ctx, client.ObjectKeyFromObject(p), &cur)).To(Succeed())
	Expect(cur.Spec.Capture).To(Equal(map[string]string{"addr": "ippool.traffic.allocate"}))

	// A policy without captures cannot gain any either.
	plain := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "admission-plain"}}
	plain.Spec.DesiredState = shared.NewState("interfaces: []\n")
	Expect(k.Create(ctx, plain)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, plain) })
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(plain), plain); err != nil {
			return err
		}
		plain.Spec.Capture = map[string]string{"addr": "ippool.traffic.allocate"}
		return k.Update(ctx, plain)
	})).To(MatchError(ContainSubstring(immutable)))

	for _, bad := range []struct{ name, value, want string }{
		{"admission-label", "-worker", "spec.nodeSelector[role]: Invalid value: \"string\": a nodeSelector value must be a valid label value"},
		{"admission-long-label", strings.Repeat("a", 64), "spec.nodeSelector.role: Too long: may not be more than 63"},
		{strings.Repeat("n", 64), "worker", "a policy's name must be 63 characters or less: it is the value of the nmstate.io/policy label"},
	} {
		q := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: bad.name}}
		q.Spec.NodeSelector = map[string]string{"role": bad.value}
		q.Spec.DesiredState = shared.NewState("interfaces: []\n")
		err := k.Create(ctx, q)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", bad.name, err)
		Expect(err.Error()).To(ContainSubstring(bad.want))
	}
}

// TestServedAsV1beta1: a policy written for nmstate.io/v1beta1, as many of
// kubernetes-nmstate's examples are, is accepted and read back as v1.
func TestServedAsV1beta1(t *testing.T) {
	RegisterTestingT(t)
	u := &unstructured.Unstructured{}
	Expect(yaml.Unmarshal([]byte(`apiVersion: nmstate.io/v1beta1
kind: NodeNetworkConfigurationPolicy
metadata:
  name: served-v1beta1
spec:
  nodeSelector: {kubernetes.io/hostname: node01}
  desiredState:
    interfaces:
    - {name: eth1, type: ethernet, state: up}
`), &u.Object)).To(Succeed())
	Expect(k.Create(ctx, u)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, u) })
	var p nmstatev1.NodeNetworkConfigurationPolicy
	Expect(k.Get(ctx, client.ObjectKey{Name: "served-v1beta1"}, &p)).To(Succeed())
	Expect(p.Spec.NodeSelector).To(Equal(map[string]string{"kubernetes.io/hostname": "node01"}))
	Expect(string(p.Spec.DesiredState.Raw)).To(ContainSubstring("eth1"))
}
