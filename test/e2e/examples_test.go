package e2e

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// examplePolicies reads the policies of the examples spec
// (envtest.ExamplesDir).
func examplePolicies() []*unstructured.Unstructured {
	GinkgoHelper()
	out, err := envtest.ExamplePolicies(envtest.ExamplesDir())
	Expect(err).NotTo(HaveOccurred())
	return out
}

// withPool returns a copy of a policy named name+"-ippool" that also puts
// an address of pool on a dummy interface, ippool0, through a capture.
func withPool(u *unstructured.Unstructured, pool string) *unstructured.Unstructured {
	GinkgoHelper()
	m := u.DeepCopy()
	m.SetName(u.GetName() + "-ippool")
	captures, _, _ := unstructured.NestedStringMap(m.Object, "spec", "capture")
	if captures == nil {
		captures = map[string]string{}
	}
	captures["pooled"] = "ippool." + pool + ".allocate"
	Expect(unstructured.SetNestedStringMap(m.Object, captures, "spec", "capture")).To(Succeed())
	ifaces, _, _ := unstructured.NestedSlice(m.Object, "spec", "desiredState", "interfaces")
	ifaces = append(ifaces, map[string]any{"name": "ippool0", "type": "dummy", "state": "up", "ipv4": map[string]any{
		"enabled": true, "dhcp": false, "address": []any{map[string]any{
			"ip": "{{ capture.pooled.ip }}", "prefix-length": "{{ capture.pooled.prefix-length }}"}}}})
	Expect(unstructured.SetNestedSlice(m.Object, ifaces, "spec", "desiredState", "interfaces")).To(Succeed())
	return m
}

// selectedNodes returns the names of the nodes a policy selects.
func selectedNodes(u *unstructured.Unstructured) []string {
	GinkgoHelper()
	selector, _, _ := unstructured.NestedStringMap(u.Object, "spec", "nodeSelector")
	var nodes corev1.NodeList
	Expect(k.List(ctx, &nodes, client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(selector)})).To(Succeed())
	var out []string
	for _, n := range nodes.Items {
		out = append(out, n.Name)
	}
	return out
}

// liveInterfaces returns the states of the interfaces of a node's
// simulated network, by name.
func liveInterfaces(node string) map[string]string {
	GinkgoHelper()
	raw, err := envtest.NewNode(node, filepath.Join(dir, "nodes"), filepath.Join(bin, "nmstatectl-sim")).Network.Show(ctx)
	Expect(err).NotTo(HaveOccurred())
	var s struct {
		Interfaces []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"interfaces"`
	}
	Expect(yaml.Unmarshal(raw, &s)).To(Succeed())
	out := map[string]string{}
	for _, i := range s.Interfaces {
		out[i.Name] = i.State
	}
	return out
}

// expectApplied checks that every selected node's network has the
// policy's interfaces, and not those it makes absent.
func expectApplied(u *unstructured.Unstructured, nodes []string) {
	GinkgoHelper()
	ifaces, _, _ := unstructured.NestedSlice(u.Object, "spec", "desiredState", "interfaces")
	for _, node := range nodes {
		live := liveInterfaces(node)
		for _, x := range ifaces {
			i, _ := x.(map[string]any)
			name, _ := i["name"].(string)
			if i["state"] == "absent" {
				Expect(live).NotTo(HaveKey(name), "%s on %s", u.GetName(), node)
			} else {
				Expect(live).To(HaveKey(name), "%s on %s", u.GetName(), node)
			}
		}
	}
}

// applyExample creates a policy, waits until every node it selects
// configured it, checks their networks, and deletes it.
func applyExample(u *unstructured.Unstructured) []string {
	GinkgoHelper()
	nodes := selectedNodes(u)
	Expect(k.Create(ctx, u)).To(Succeed(), "policy %s", u.GetName())
	want := fmt.Sprintf("Available: %d/%d nodes successfully configured", len(nodes), len(nodes))
	Eventually(func() string {
		var p nmstatev1.NodeNetworkConfigurationPolicy
		if err := k.Get(ctx, client.ObjectKeyFromObject(u), &p); err != nil {
			return err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				return fmt.Sprintf("%s: %s", c.Type, c.Message)
			}
		}
		return "no condition"
	}).Should(Equal(want), "policy %s", u.GetName())
	expectApplied(u, nodes)
	return nodes
}

// removeExample deletes a policy and waits for its enactments to go.
func removeExample(u *unstructured.Unstructured) {
	GinkgoHelper()
	Expect(k.Delete(ctx, u)).To(Succeed())
	Eventually(func() []string {
		return names(&nmstatev1.NodeNetworkConfigurationPolicyList{})
	}).ShouldNot(ContainElement(u.GetName()))
	Eventually(func() int { return enactmentsOf(u.GetName()) }).Should(BeZero())
}

func enactmentsOf(policy string) int {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	Expect(k.List(ctx, &list, client.MatchingLabels{shared.EnactmentPolicyLabel: policy})).To(Succeed())
	return len(list.Items)
}

// saveNodeNetworks returns a function that puts the nodes' simulated
// networks back as they are now (envtest.SaveNetworks).
func saveNodeNetworks() func() {
	GinkgoHelper()
	restore, err := envtest.SaveNetworks(filepath.Join(dir, "nodes"))
	Expect(err).NotTo(HaveOccurred())
	return func() {
		GinkgoHelper()
		Expect(restore()).To(Succeed())
	}
}

var _ = Describe("kubernetes-nmstate's documented kinds of policies", func() {
	It("apply unchanged, each on its own and each beside an ippool capture", func() {
		// Each example starts from the nodes' networks as they are now:
		// one leaves a bond whose ports another gives addresses to, which
		// nmstate refuses.
		fresh := saveNodeNetworks()
		DeferCleanup(fresh)
		createPool("examples", ippoolv1.IPRange{CIDR: "10.199.0.0/24"})
		Eventually(poolAvailable("examples")).Should(Equal("True ReconciledPool"))
		for _, u := range examplePolicies() {
			By("applying " + u.GetName() + " (" + u.GetAPIVersion() + ")")
			applyExample(u.DeepCopy())
			removeExample(u)
			fresh()

			pooled := withPool(u, "examples")
			By("applying " + pooled.GetName())
			nodes := applyExample(pooled)
			var addresses []string
			for _, node := range nodes {
				ip := held(node, pooled.GetName(), "examples")
				Expect(ip).To(HaveLen(1), "%s on %s", pooled.GetName(), node)
				Expect(configured(node, "ippool0")).To(ContainElement(ip[0] + "/24"))
				addresses = append(addresses, ip[0])
			}
			slices.Sort(addresses)
			Expect(slices.Compact(slices.Clone(addresses))).To(Equal(addresses), "every node has its own address")
			removeExample(pooled)
			// The handler takes the released addresses off once the
			// enactments are gone (an apply of its own): the networks are
			// put back once that is done, not under it.
			Eventually(func(g Gomega) {
				for _, node := range nodes {
					g.Expect(configured(node, "ippool0")).To(BeEmpty(), node)
				}
				g.Expect(envtest.PoolAddresses(ctx, k, "examples")).To(BeEmpty())
				checkpoints, err := filepath.Glob(filepath.Join(dir, "nodes", "*.checkpoint"))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(checkpoints).To(BeEmpty())
			}).Should(Succeed(), "the addresses of %s taken off", pooled.GetName())
			fresh()
		}
	})
})
