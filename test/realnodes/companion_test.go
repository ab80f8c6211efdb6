package realnodes

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// companionAfterUninstall is the last spec of a Helm install: the admin
// uninstalls the release and installs the chart again in companion mode,
// as beside kubernetes-nmstate's operator, whose CRDs are here those the
// first release kept. No handler of ours runs any more; the pool
// controller runs in companion mode, ready (its webhook served, its
// admission policies in place), and a pooled policy gives each real node
// its own address of a new pool, written into the NNCP it keeps for the
// node. Applying those is kubernetes-nmstate's handler's work, which
// needs NetworkManager and does not run on these nodes (test/peer runs it
// on simulated ones).
func companionAfterUninstall() {
	if install != "helm" {
		Skip("the suite installed with kubectl apply -k; " + installEnv + "=helm installs the Helm chart")
	}
	repo := envtest.RepoRoot()
	chart := filepath.Join(repo, "deploy", "helm", "nmstate-ippool")
	By("helm uninstall")
	out, err := exec.Command(filepath.Join(repo, "bin", "helm"), "uninstall", "nmstate-ippool", "--kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--namespace", namespace, "--wait").CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "%s", out)
	Eventually(func() []string { return podNames("handler") }).Should(BeEmpty())

	By("installing the chart in companion mode: deploy/local/helm-values.yaml and mode: companion")
	local, err := os.ReadFile(filepath.Join(repo, "deploy", "local", "helm-values.yaml"))
	Expect(err).NotTo(HaveOccurred())
	values := filepath.Join(GinkgoT().TempDir(), "companion-values.yaml")
	Expect(os.WriteFile(values, append(local, "mode: companion\n"...), 0o600)).To(Succeed())
	localcluster("install", "--helm", chart, "--namespace", namespace, "--values", values,
		"--helm-bin", filepath.Join(repo, "bin", "helm"), "--kubectl", filepath.Join(repo, "bin", "kubectl"))
	Eventually(func() int {
		n := 0
		for _, p := range pods("pool-controller") {
			if slices.Contains(p.Spec.Containers[0].Args, "--mode=companion") && ready(&p) {
				n++
			}
		}
		return n
	}).Should(Equal(2), "both pool controller replicas run in companion mode, ready")
	Expect(podNames("handler")).To(BeEmpty())
	for _, name := range []string{"nmstate-ippool-allocation-state", "nmstate-ippool-node-bound-own-node",
		"nmstate-ippool-pool-controller-nodes", "nmstate-ippool-upstream-handler"} {
		Expect(k.Get(ctx, client.ObjectKey{Name: name}, &admissionregistrationv1.ValidatingAdmissionPolicy{})).To(Succeed(),
			"companion mode's admission policy %s", name)
	}

	By("a pooled policy of a new pool, on every node at once (maxUnavailable 100%: no handler reports back here)")
	var nodes corev1.NodeList
	Expect(k.List(ctx, &nodes)).To(Succeed())
	Expect(k.Create(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "companion-1"},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.20.30.0/24", Start: "10.20.30.10", End: "10.20.30.20"}}})).To(Succeed())
	Expect(k.Create(ctx, &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "companion-ip"},
		Spec: shared.NodeNetworkConfigurationPolicySpec{
			MaxUnavailable: ptr.To(intstr.FromString("100%")),
			Capture:        map[string]string{"addr": "ippool.companion-1.allocate"},
			// The README's example, on another NIC.
			DesiredState: shared.NewState(strings.Replace(envtest.OneAddressState, "name: eth1", "name: eth2", 1))}})).To(Succeed())
	Eventually(func(g Gomega) {
		var p ippoolv1.PooledNodeNetworkConfigurationPolicy
		g.Expect(k.Get(ctx, client.ObjectKey{Name: "companion-ip"}, &p)).To(Succeed())
		ips := map[string]string{}
		for _, n := range nodes.Items {
			rec := p.Status.NodeOf(n.Name)
			g.Expect(rec).NotTo(BeNil(), "the record of node %s", n.Name)
			g.Expect(rec.Addresses).To(HaveLen(1))
			ips[n.Name] = rec.Addresses[0].IP
		}
		g.Expect(envtest.Distinct(ips)).To(HaveLen(len(nodes.Items)))
		var generated nmstatev1.NodeNetworkConfigurationPolicyList
		g.Expect(k.List(ctx, &generated, client.MatchingLabels{ippoolv1.PooledPolicyLabel: "companion-ip"})).To(Succeed())
		g.Expect(generated.Items).To(HaveLen(len(nodes.Items)))
		for _, nncp := range generated.Items {
			node := nncp.Annotations[ippoolv1.PooledNodeAnnotation]
			g.Expect(ips).To(HaveKey(node))
			g.Expect(string(nncp.Spec.DesiredState.Raw)).To(ContainSubstring(ips[node]), "the NNCP of node %s", node)
		}
	}).Should(Succeed())
}
