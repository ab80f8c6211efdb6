package handler_test

import (
	"context"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestPolicyHeldByAFinalizerIsApplied: a policy without ippool captures
// that a finalizer holds after its deletion (companion mode's generated
// policies, which take their addresses off so; any policy deleted in the
// foreground) is applied until it is gone, as kubernetes-nmstate's handler
// applies it, a change made meanwhile included; its enactment goes with it.
func TestPolicyHeldByAFinalizerIsApplied(t *testing.T) {
	RegisterTestingT(t)
	nodes := newNodes(t, "held", 1, map[string]string{"role": "held"})
	state := func(ip string) *shared.State {
		s := shared.NewState("interfaces:\n- name: eth1\n  type: ethernet\n  state: up\n  ipv4:\n    enabled: true\n    dhcp: false\n" +
			"    address:\n    - ip: " + ip + "\n      prefix-length: 24\n")
		return &s
	}
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/keep"}}}
	p.Spec.NodeSelector = map[string]string{"role": "held"}
	p.Spec.DesiredState = *state("192.0.2.10")
	Expect(k.Create(context.Background(), p)).To(Succeed())
	t.Cleanup(func() {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := k.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
				return client.IgnoreNotFound(err)
			}
			p.Finalizers = nil
			return k.Update(context.Background(), p)
		})
	})
	start(t, nodes[0])
	Eventually(enactmentState("held01", "held")).Should(HavePrefix("Available"))
	Expect(nodes[0].Configured("eth1")).To(Equal("192.0.2.10/24"))

	Expect(k.Delete(context.Background(), p)).To(Succeed())
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		p.Spec.DesiredState = *state("192.0.2.11")
		return k.Update(context.Background(), p)
	})).To(Succeed())
	Eventually(nodes[0].Configured).WithArguments("eth1").Should(Equal("192.0.2.11/24"), "the change is applied while the policy is held")
	Eventually(func() (int64, error) {
		e, err := getEnactment("held01", "held")
		return e.Status.PolicyGeneration, err
	}).Should(Equal(p.Generation))
	Eventually(enactmentState("held01", "held")).Should(HavePrefix("Available"))

	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		p.Finalizers = nil
		return k.Update(context.Background(), p)
	})).To(Succeed())
	Eventually(func() bool {
		_, err := getEnactment("held01", "held")
		return apierrors.IsNotFound(err)
	}).Should(BeTrue(), "the enactment goes with the policy")
}
