package peer

import (
	"errors"
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
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// companionState puts the capture addr on eth1 and routes 198.51.100.0/24
// through the node's own default gateway, a capture kubernetes-nmstate's
// handler resolves on the node.
const companionState = envtest.OneAddressState + routeViaGateway

var _ = Describe("Companion mode: pooled policies beside kubernetes-nmstate's handler", Ordered, func() {
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
	carried := func(node string) []string {
		return envtest.NewNode(node, filepath.Join(cdir, "nodes"), filepath.Join(bin, "nmstatectl-sim")).ConfiguredAll("eth1")
	}
	// statusIn is the True condition of a pooled policy.
	statusIn := func(policy string) string {
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
	statusOf := func() string { return statusIn(name) }
	// recordIn is the one address a pooled policy records for a node.
	recordIn := func(policy, node string) string {
		var p ippoolv1.PooledNodeNetworkConfigurationPolicy
		if err := kc.Get(ctx, types.NamespacedName{Name: policy}, &p); err != nil {
			return err.Error()
		}
		if n := p.Status.NodeOf(node); n != nil && len(n.Addresses) == 1 {
			return n.Addresses[0].IP
		}
		return ""
	}
	recordOf := func(node string) string { return recordIn(name, node) }
	generatedOf := func(policy string) []string {
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
	generated := func() []string { return generatedOf(name) }
	// deselect takes the label the pooled policy selects off a node.
	deselect := func(node string) {
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
	progressing := func() ([]string, bool) {
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
	plugin := func(args ...string) (string, error) {
		out, err := exec.Command(filepath.Join(bin, "kubectl-nodeippool"), append(args, "--kubeconfig", filepath.Join(cdir, "kubeconfig"))...).CombinedOutput()
		return string(out), err
	}

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

	It("gives a node a new address on a reset of its generated policy", func() {
		old := recordOf("node01")
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var g nmstatev1.NodeNetworkConfigurationPolicy
			if err := kc.Get(ctx, types.NamespacedName{Name: ippoolv1.NodePolicyName(name, "node01")}, &g); err != nil {
				return err
			}
			g.Annotations[ippoolv1.ResetIPPoolAnnotation] = pool
			return kc.Update(ctx, &g)
		})).To(Succeed())
		Eventually(func() string { return recordOf("node01") }).ShouldNot(Or(BeEmpty(), Equal(old)))
		Eventually(func() []string { return carried("node01") }).Should(ConsistOf(recordOf("node01") + "/24"))
		Eventually(func() ([]string, error) { return envtest.PoolAddresses(ctx, kc, pool) }).ShouldNot(ContainElement(old))
	})

	It("moves a node's address with its template: kubernetes-nmstate's handler takes it off the old NIC as it puts it on the new one", func() {
		on := func(node, iface string) []string {
			return envtest.NewNode(node, filepath.Join(cdir, "nodes"), filepath.Join(bin, "nmstatectl-sim")).ConfiguredAll(iface)
		}
		move := func(from, to string) {
			GinkgoHelper()
			By("moving the template's address from " + from + " to " + to)
			Expect(envtest.Edit(ctx, kc, pooled, func(p *ippoolv1.PooledNodeNetworkConfigurationPolicy) {
				p.Spec.DesiredState = shared.NewState(strings.Replace(companionState, "name: eth1", "name: "+to, 1))
			})).To(Succeed())
			selected := []string{"node01", "node04"}
			for _, node := range selected {
				ip := recordOf(node)
				Eventually(func() []string { return on(node, to) }).Should(ConsistOf(ip+"/24"), node)
				Expect(on(node, from)).To(BeEmpty(), "%s carries %s on two NICs", node, ip)
			}
			Eventually(func(g Gomega) {
				g.Expect(statusOf()).To(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
				for _, node := range selected {
					var p nmstatev1.NodeNetworkConfigurationPolicy
					g.Expect(kc.Get(ctx, types.NamespacedName{Name: ippoolv1.NodePolicyName(name, node)}, &p)).To(Succeed())
					g.Expect(string(p.Spec.DesiredState.Raw)).NotTo(ContainSubstring("name: "+from), "%s's policy kept the take-off", node)
					g.Expect(on(node, to)).To(ConsistOf(recordOf(node)+"/24"), node)
					g.Expect(on(node, from)).To(BeEmpty(), node)
				}
			}).Should(Succeed())
		}
		before := map[string]string{"node01": recordOf("node01"), "node04": recordOf("node04")}
		move("eth1", "eth3")
		move("eth3", "eth1")
		Expect(map[string]string{"node01": recordOf("node01"), "node04": recordOf("node04")}).To(Equal(before), "a move renumbers nothing")
		out, err := plugin("check")
		Expect(err).NotTo(HaveOccurred(), out)
	})

	It("writes the pool's gateway in, honours reservations, and waits on an exhausted pool until it grows", func() {
		spec := ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.73.0.0/24", Start: "10.73.0.10", End: "10.73.0.10"},
			Gateway: "10.73.0.1", Reservations: []ippoolv1.Reservation{{IP: "10.73.0.10", Node: "node04"}}}
		Expect(kc.Create(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "small"}, Spec: spec})).To(Succeed())
		second := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "eth2-small"}}
		second.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/worker": ""}
		second.Spec.Capture = map[string]string{"addr": "ippool.small.allocate"}
		second.Spec.DesiredState = shared.NewState(`interfaces:
- name: eth2
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address:
    - ip: "{{ capture.addr.ip }}"
      prefix-length: "{{ capture.addr.prefix-length }}"
routes:
  config:
  - destination: 203.0.113.0/24
    next-hop-address: "{{ capture.addr.gateway }}"
    next-hop-interface: eth2
`)
		Expect(kc.Create(ctx, second)).To(Succeed())
		DeferCleanup(func() { _ = kc.Delete(ctx, second) })
		condition := func() string { return statusIn(second.Name) }
		Eventually(condition).Should(HavePrefix("Degraded IPPoolExhausted: NodeIPPool small has no address left for node node01"))
		eth2 := func(node string) []string {
			return envtest.NewNode(node, filepath.Join(cdir, "nodes"), filepath.Join(bin, "nmstatectl-sim")).ConfiguredAll("eth2")
		}
		Eventually(func() []string { return eth2("node04") }).Should(ConsistOf("10.73.0.10/24"), "reserved for node04")

		By("growing the pool in place")
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var pool ippoolv1.NodeIPPool
			if err := kc.Get(ctx, types.NamespacedName{Name: "small"}, &pool); err != nil {
				return err
			}
			pool.Spec.Range.End = "10.73.0.20"
			return kc.Update(ctx, &pool)
		})).To(Succeed())
		Eventually(condition).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
		Expect(eth2("node01")).To(ConsistOf("10.73.0.11/24"))
		var g nmstatev1.NodeNetworkConfigurationPolicy
		Expect(kc.Get(ctx, types.NamespacedName{Name: ippoolv1.NodePolicyName("eth2-small", "node01")}, &g)).To(Succeed())
		Expect(string(g.Spec.DesiredState.Raw)).To(ContainSubstring("next-hop-address: 10.73.0.1\n"), "the pool's gateway, written in")
		out, err := plugin("plan", "-f", writeFile(`apiVersion: nmstate.io/v1
kind: PooledNodeNetworkConfigurationPolicy
metadata: {name: eth2-small}
spec:
  nodeSelector: {node-role.kubernetes.io/worker: ""}
  capture: {addr: ippool.small.allocate}
  desiredState:
    interfaces:
    - name: eth2
      type: ethernet
      state: up
      ipv4: {enabled: true, dhcp: false, address: [{ip: "{{ capture.addr.ip }}", prefix-length: "{{ capture.addr.prefix-length }}"}]}
`))
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("10.73.0.11"))
	})

	It("takes a node's addresses off when a pooled policy is deleted with --cascade=orphan: they belong to the pools", func() {
		eth2 := func() []string {
			return envtest.NewNode("node01", filepath.Join(cdir, "nodes"), filepath.Join(bin, "nmstatectl-sim")).ConfiguredAll("eth2")
		}
		// eth2 is node01's again once the pooled policy of the spec
		// before has taken its address off.
		Eventually(func() []string { return generatedOf("eth2-small") }).Should(BeEmpty())
		Expect(eth2()).To(BeEmpty())
		orphan := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "eth2-orphan"}}
		orphan.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "node01"}
		orphan.Spec.Capture = map[string]string{"addr": "ippool." + pool + ".allocate"}
		orphan.Spec.DesiredState = shared.NewState(strings.ReplaceAll(envtest.OneAddressState, "eth1", "eth2"))
		Expect(kc.Create(ctx, orphan)).To(Succeed())
		Eventually(eth2).Should(HaveLen(1))
		ip := strings.TrimSuffix(eth2()[0], "/24")
		Expect(kc.Delete(ctx, orphan, client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
		Eventually(func() error {
			return kc.Get(ctx, client.ObjectKeyFromObject(orphan), &ippoolv1.PooledNodeNetworkConfigurationPolicy{})
		}).Should(MatchError(ContainSubstring("not found")))
		Expect(eth2()).To(BeEmpty(), "off the NIC before the pooled policy went")
		Expect(generatedOf("eth2-orphan")).To(BeEmpty(), "no policy left behind with a pool's address")
		Eventually(func() ([]string, error) { return envtest.PoolAddresses(ctx, kc, pool) }).ShouldNot(ContainElement(ip))
	})

	It("tries a removal that failed again once the node can apply it, and frees the address then", func() {
		ip := recordOf("node04")
		Expect(ip).NotTo(BeEmpty())
		// kubernetes-nmstate's handler on node04 fails every apply for a
		// while: the policy that takes the address off fails, its retries
		// spent.
		fail := filepath.Join(cdir, "nodes", "node04.yaml.fail")
		Expect(os.WriteFile(fail, []byte("apply: simulated failure of the node's network\n"), 0o600)).To(Succeed())
		DeferCleanup(func() { _ = os.Remove(fail) })
		deselect("node04")
		Eventually(statusOf, 3*time.Minute).Should(HavePrefix("Degraded FailedToConfigure: node node04 could not apply policy "+
			ippoolv1.NodePolicyName(name, "node04")), "the failed removal is said")
		Expect(carried("node04")).To(ConsistOf(ip+"/24"), "still on its NIC")
		Expect(envtest.PoolAddresses(ctx, kc, pool)).To(ContainElement(ip), "held until it is off")

		// The node can apply again; kubernetes-nmstate's handler never
		// applies a generation it gave up on by itself: the pool
		// controller writes the removal again.
		Expect(os.Remove(fail)).To(Succeed())
		Eventually(func() []string { return carried("node04") }, 3*time.Minute).Should(BeEmpty(), "taken off by the removal tried again")
		Eventually(generated).ShouldNot(ContainElement(ippoolv1.NodePolicyName(name, "node04")))
		Eventually(func() ([]string, error) { return envtest.PoolAddresses(ctx, kc, pool) }).ShouldNot(ContainElement(ip))
		Eventually(statusOf).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"))
	})

	It("takes every address off its NIC when the pooled policy is deleted with --cascade=foreground, before its policies go", func() {
		Expect(kc.Delete(ctx, pooled, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
		Eventually(generated).Should(BeEmpty())
		for _, node := range []string{"node01", "node04"} {
			Expect(carried(node)).To(BeEmpty(), node)
		}
		Eventually(func() error {
			return kc.Get(ctx, client.ObjectKeyFromObject(pooled), &ippoolv1.PooledNodeNetworkConfigurationPolicy{})
		}).Should(MatchError(ContainSubstring("not found")))
		Eventually(func() ([]string, error) { return envtest.PoolAddresses(ctx, kc, pool) }).Should(BeEmpty())
	})

	It("lets a node whose machine is off hold no rollout and no release: ignored NotReady, its own address released once it runs again", func() {
		const other = "eth1-notready"
		statusOfOther := func() string { return statusIn(other) }
		recordOfOther := func(node string) string { return recordIn(other, node) }
		// node05's machine stops before the policy exists: the node
		// lifecycle controller turns it NotReady, no handler runs there.
		localclusterIn(cdir, "node", "add", "node05")
		localclusterIn(cdir, "node", "stop", "node05")
		p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: other}}
		p.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/worker": ""}
		p.Spec.Capture = map[string]string{"addr": "ippool." + pool + ".allocate"}
		p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
		one := intstr.FromInt32(1)
		p.Spec.MaxUnavailable = &one
		Expect(kc.Create(ctx, p)).To(Succeed())
		Eventually(statusOfOther).Should(Equal("Available SuccessfullyConfigured: 1/2 nodes successfully configured, 1 nodes ignored due to NotReady state"),
			"the stopped node holds no maxUnavailable slot")
		Expect(carried("node01")).To(ConsistOf(recordOfOther("node01") + "/24"))

		By("its machine runs again: the rollout reaches it")
		localclusterIn(cdir, "node", "start", "node05")
		Eventually(statusOfOther).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
		held := recordOfOther("node05")
		Expect(carried("node05")).To(ConsistOf(held + "/24"))

		By("its machine stops again, with its address, and the pooled policy is deleted")
		localclusterIn(cdir, "node", "stop", "node05")
		Expect(kc.Delete(ctx, p)).To(Succeed())
		Eventually(func() []string { return carried("node01") }).Should(BeEmpty(), "node01's release does not wait for node05")
		Eventually(statusOfOther).Should(HavePrefix("Degraded NodeNotReady: Node node05 is not Ready: "+held+" stay recorded and quarantined"),
			"the deletion says what it waits for")
		Expect(envtest.PoolAddresses(ctx, kc, pool)).To(ContainElement(held), "held while its machine may carry it")

		By("its machine runs again: kubernetes-nmstate's handler takes the address off, and the pooled policy goes")
		localclusterIn(cdir, "node", "start", "node05")
		Eventually(func() error {
			return kc.Get(ctx, client.ObjectKeyFromObject(p), &ippoolv1.PooledNodeNetworkConfigurationPolicy{})
		}, 2*time.Minute).Should(MatchError(ContainSubstring("not found")))
		Expect(carried("node05")).To(BeEmpty())
		Eventually(func() ([]string, error) { return envtest.PoolAddresses(ctx, kc, pool) }).Should(BeEmpty())
	})

	It("never puts the address of a Node deleted while its machine runs on another NIC: three nodes join a pool with one free address", func() {
		const tight = "eth1-tight"
		machines := []string{"node06", "node07", "node08", "node09", "node10"}
		Expect(kc.Create(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "tight"},
			Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.75.0.0/24", Start: "10.75.0.10", End: "10.75.0.12"}}})).To(Succeed())
		for _, node := range machines[:2] {
			localclusterIn(cdir, "node", "add", node, "--label", "tight=yes")
		}
		// Every machine, its Node deleted or not, carries no address
		// another carries.
		sampler := envtest.Sample(100*time.Millisecond, func() ([]string, bool) {
			on := map[string][]string{}
			for _, node := range machines {
				for _, addr := range carried(node) {
					on[addr] = append(on[addr], node)
				}
			}
			var problems []string
			for addr, nodes := range on {
				if len(nodes) > 1 {
					problems = append(problems, addr+" on "+strings.Join(nodes, " and "))
				}
			}
			return problems, true
		})
		p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: tight}}
		p.Spec.NodeSelector = map[string]string{"tight": "yes"}
		p.Spec.Capture = map[string]string{"addr": "ippool.tight.allocate"}
		p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
		Expect(kc.Create(ctx, p)).To(Succeed())
		Eventually(func() string { return statusIn(tight) }).Should(Equal("Available SuccessfullyConfigured: 2/2 nodes successfully configured"))
		gone := recordIn(tight, "node07")
		Expect(carried("node07")).To(ConsistOf(gone + "/24"))

		By("node07's Node deleted while its machine runs, then three nodes join: one free address, and node07's")
		localclusterIn(cdir, "node", "remove", "node07")
		Expect(carried("node07")).To(BeEmpty(), "off its NIC before its Node went")
		for _, node := range machines[2:] {
			localclusterIn(cdir, "node", "add", node, "--label", "tight=yes")
		}
		// The free address at once; node07's once it is no longer kept
		// for its return (the departure hold): the pool is full.
		served := func() map[string]string {
			out := map[string]string{}
			for _, node := range append([]string{"node06"}, machines[2:]...) {
				if ip := recordIn(tight, node); ip != "" {
					out[node] = ip
				}
			}
			return out
		}
		Eventually(served, 3*time.Minute).Should(HaveLen(3), "two of the three joiners get one")
		Expect(envtest.Distinct(served())).To(HaveLen(3))
		Expect(served()).To(ContainElement(gone), "node07's address, once off its NIC, is handed out again")
		for node, ip := range served() {
			Eventually(func() []string { return carried(node) }).Should(ConsistOf(ip+"/24"), node)
		}
		Eventually(func() string { return statusIn(tight) }).Should(
			HavePrefix("Degraded IPPoolExhausted: NodeIPPool tight has no address left for node"), "the third waits, and says so")
		samples, problems := sampler.End()
		Expect(problems).To(BeEmpty(), "no address on two machines")
		Expect(samples).To(BeNumerically(">", 0))
	})

	It("serves a node whose NodeNetworkState kubernetes-nmstate's handler left without a state: deleted for the handler to publish it again", func() {
		const stuck = "eth1-stuck"
		localclusterIn(cdir, "node", "add", "node11", "--label", "stuck=yes")
		nns := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "node11"}}
		published := func() bool {
			return kc.Get(ctx, client.ObjectKeyFromObject(nns), nns) == nil && lifecycle.Published(nns)
		}
		Eventually(published).Should(BeTrue())

		By("its state deleted and created again empty before its handler does: the handler's own create fails, and it never writes " +
			"the state of a network it published already")
		var empty types.UID
		Eventually(func() error {
			if err := kc.Delete(ctx, &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "node11"}}); client.IgnoreNotFound(err) != nil {
				return err
			}
			made := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "node11"}}
			if err := kc.Create(ctx, made); err != nil {
				return err // the handler's create came first
			}
			for range 20 {
				time.Sleep(250 * time.Millisecond)
				if err := kc.Get(ctx, client.ObjectKeyFromObject(nns), nns); err != nil {
					return err
				}
				if nns.UID != made.UID || lifecycle.Published(nns) {
					return errors.New("the handler published a state: again")
				}
			}
			empty = made.UID
			return nil
		}, 2*time.Minute, time.Second).Should(Succeed())

		p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: stuck}}
		p.Spec.NodeSelector = map[string]string{"stuck": "yes"}
		p.Spec.Capture = map[string]string{"addr": "ippool." + pool + ".allocate"}
		p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
		Expect(kc.Create(ctx, p)).To(Succeed())
		Eventually(func() string { return statusIn(stuck) }).Should(
			HavePrefix("Degraded NodeStateUnknown: the NodeNetworkState of node node11 holds no state"), "it waits, and says why")
		Eventually(func() string { return statusIn(stuck) }).Should(Equal("Available SuccessfullyConfigured: 1/1 nodes successfully configured"))
		ip := recordIn(stuck, "node11")
		Expect(ip).NotTo(BeEmpty())
		Expect(carried("node11")).To(ConsistOf(ip + "/24"))
		Expect(kc.Get(ctx, client.ObjectKeyFromObject(nns), nns)).To(Succeed())
		Expect(nns.UID).NotTo(Equal(empty), "the empty state was deleted; the handler created it again")
		Expect(envtest.Events(ctx, kc, "PooledNodeNetworkConfigurationPolicy", stuck)).To(
			ContainElement(HavePrefix("NodeStateRenewed: deleted the NodeNetworkState of node node11")))
	})
})
