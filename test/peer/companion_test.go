package peer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// companionState puts the capture addr on eth1 and routes 198.51.100.0/24
// through the node's own default gateway, a capture kubernetes-nmstate's
// handler resolves on the node.
const companionState = envtest.OneAddressState + routeViaGateway

// The companion cluster of the Describe below, and the pooled policy its
// specs roll out, shared by its specs in this file and in
// companion_*_test.go, in order.
var (
	cdir    string
	kc      client.Client
	nodes   = []string{"node01", "node02", "node03"}
	pooled  *ippoolv1.PooledNodeNetworkConfigurationPolicy
	sampler *envtest.Sampler
)

const pool, name = "companion", "eth1-static"

// carried returns the addresses a node of the companion cluster carries
// on eth1.
func carried(node string) []string {
	return envtest.NewNode(node, filepath.Join(cdir, "nodes"), filepath.Join(bin, "nmstatectl-sim")).ConfiguredAll("eth1")
}

// statusIn is the True condition of a pooled policy.
func statusIn(policy string) string {
	var p ippoolv1.PooledNodeNetworkConfigurationPolicy
	if err := kc.Get(ctx, types.NamespacedName{Name: policy}, &p); err != nil {
		return err.Error()
	}
	for _, c := range p.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			return string(c.Type) + " " + string(c.Reason) + ": " + c.Message
		}
	}
	return "no True condition"
}

func statusOf() string { return statusIn(name) }

// recordIn is the one address a pooled policy records for a node.
func recordIn(policy, node string) string {
	var p ippoolv1.PooledNodeNetworkConfigurationPolicy
	if err := kc.Get(ctx, types.NamespacedName{Name: policy}, &p); err != nil {
		return err.Error()
	}
	if n := p.Status.NodeOf(node); n != nil && len(n.Addresses) == 1 {
		return n.Addresses[0].IP
	}
	return ""
}

func recordOf(node string) string { return recordIn(name, node) }

func generatedOf(policy string) []string {
	var list nmstatev1.NodeNetworkConfigurationPolicyList
	if err := kc.List(ctx, &list, client.MatchingLabels{ippoolv1.PooledPolicyLabel: policy}); err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, g := range list.Items {
		out = append(out, g.Name)
	}
	return out
}

func generated() []string { return generatedOf(name) }

// deselect takes the label the pooled policy selects off a node.
func deselect(node string) {
	GinkgoHelper()
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := kc.Get(ctx, types.NamespacedName{Name: node}, &n); err != nil {
			return err
		}
		delete(n.Labels, "node-role.kubernetes.io/worker")
		return kc.Update(ctx, &n)
	})).To(Succeed())
}

// progressing lists the generated NNCPs kubernetes-nmstate's handler
// has not finished at their generation.
func progressing() ([]string, bool) {
	var list nmstatev1.NodeNetworkConfigurationPolicyList
	if err := kc.List(ctx, &list, client.MatchingLabels{ippoolv1.PooledPolicyLabel: name}); err != nil {
		return nil, false
	}
	var busy []string
	for _, g := range list.Items {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		err := kc.Get(ctx, shared.EnactmentKey(g.Annotations[ippoolv1.PooledNodeAnnotation], g.Name), &e)
		t := conditions.TrueType(e.Status.Conditions)
		if err != nil || e.Status.PolicyGeneration != g.Generation ||
			(t != shared.NodeNetworkConfigurationEnactmentConditionAvailable && t != shared.NodeNetworkConfigurationEnactmentConditionFailing) {
			busy = append(busy, g.Name)
		}
	}
	return busy, true
}

func plugin(args ...string) (string, error) {
	out, err := exec.Command(filepath.Join(bin, "kubectl-nodeippool"), append(args, "--kubeconfig", filepath.Join(cdir, "kubeconfig"))...).CombinedOutput()
	return string(out), err
}

var _ = Describe("Companion mode: pooled policies beside kubernetes-nmstate's handler", Ordered, func() {
	BeforeAll(func() {
		root, err := os.MkdirTemp("", "nmstate-ippool-companion-")
		Expect(err).NotTo(HaveOccurred())
		cdir = filepath.Join(root, "cluster")
		By("starting a local cluster whose nodes run kubernetes-nmstate's handler, and the pool controller in companion mode")
		localclusterIn(cdir, "up", "--nodes", "3", "--handler", "upstream", "--companion", "--peer-handler", peerHandler,
			"--bin", bin, "--assets", envtest.AssetsDir(), "--gc-grace-period", "5s", "--quarantine-period", "60s", "--node-grace-period", "10s")
		DeferCleanup(func() {
			localclusterIn(cdir, "down")
			_ = os.RemoveAll(root)
		})
		kc, err = envtest.LocalClusterClient(cdir)
		Expect(err).NotTo(HaveOccurred())
		Expect(kc.Create(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool},
			Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.72.0.0/24", Start: "10.72.0.10", End: "10.72.0.50"}}})).To(Succeed())
	})

	It("rolls a pooled policy out through kubernetes-nmstate's handler, one node at a time, each with its own address", func() {
		pooled = &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
		pooled.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/worker": ""}
		pooled.Spec.Capture = map[string]string{"addr": "ippool." + pool + ".allocate", "gw": `routes.running.destination=="0.0.0.0/0"`}
		pooled.Spec.DesiredState = shared.NewState(companionState)
		one := intstr.FromInt32(1)
		pooled.Spec.MaxUnavailable = &one
		sampler = envtest.Sample(100*time.Millisecond, func() ([]string, bool) {
			busy, ok := progressing()
			if len(busy) > 1 {
				return []string{strings.Join(busy, ", ") + " progress at once"}, ok
			}
			return nil, ok
		})
		Expect(kc.Create(ctx, pooled)).To(Succeed())
		Eventually(statusOf).Should(Equal("Available SuccessfullyConfigured: 3/3 nodes successfully configured"))
		samples, problems := sampler.End()
		Expect(problems).To(BeEmpty(), "maxUnavailable 1 across the generated policies")
		Expect(samples).To(BeNumerically(">", 0))
		seen := map[string]string{}
		for _, node := range nodes {
			ip := recordOf(node)
			Expect(ip).NotTo(BeEmpty(), node)
			Expect(carried(node)).To(ConsistOf(ip+"/24"), "kubernetes-nmstate's handler applied the address of %s", node)
			seen[node] = ip
			policyAvailableIn(kc, ippoolv1.NodePolicyName(name, node))
		}
		Expect(envtest.Distinct(seen)).To(HaveLen(len(nodes)))
		out, err := plugin("show", pool)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("pnncp/" + name))
		out, err = plugin("check")
		Expect(err).NotTo(HaveOccurred(), out)
	})

	It("keeps a Node deleted while its machine runs until kubernetes-nmstate's handler took its address off, frees it for its return, configures a joining node", func() {
		gone := recordOf("node03")
		Expect(carried("node03")).To(ConsistOf(gone + "/24"))
		// The Node first, its handler stopped once the Node is gone, as
		// an admin who deletes a Node before powering its machine off.
		localclusterIn(cdir, "node", "remove", "node03")
		Expect(carried("node03")).To(BeEmpty(), "the machine no longer carries the address once its Node is gone")
		Eventually(func() string { return recordOf("node03") }).Should(BeEmpty())
		Eventually(generated).ShouldNot(ContainElement(ippoolv1.NodePolicyName(name, "node03")))
		Eventually(func() ([]string, error) { return envtest.KeptAddresses(ctx, kc, pool) }).Should(ContainElement(gone))
		localclusterIn(cdir, "node", "add", "node04")
		Eventually(statusOf).Should(Equal("Available SuccessfullyConfigured: 3/3 nodes successfully configured"))
		Expect(carried("node04")).To(ConsistOf(recordOf("node04") + "/24"))
		Expect(recordOf("node04")).NotTo(Equal(gone), "kept for node03's return")
	})

	It("takes a deselected node's address off its NIC before its policy goes, and frees it on the node's evidence", func() {
		ip := recordOf("node02")
		deselect("node02")
		Eventually(generated).ShouldNot(ContainElement(ippoolv1.NodePolicyName(name, "node02")))
		Expect(carried("node02")).To(BeEmpty(), "off the NIC before the policy went")
		Eventually(func() ([]string, error) { return envtest.PoolAddresses(ctx, kc, pool) }).ShouldNot(ContainElement(ip))
		Eventually(statusOf).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
	})

	companionAddressSpecs()
	companionRemovalSpecs()
	companionNodeSpecs()
})
