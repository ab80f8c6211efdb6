package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// migrationFile is what an admin writes to move nodes labelled
// migrate=yes from one static policy each to one pooled policy: a pool
// over the range the static addresses were typed from, and the policy.
var migrationFile = `apiVersion: nmstate.io/v1
kind: NodeIPPool
metadata: {name: migrate}
spec:
  range: {cidr: 10.63.0.0/24, start: 10.63.0.10, end: 10.63.0.200}
---
` + envtest.PooledPolicyYAML("migrate", "migrate", "yes", "migrate")

// staticPolicy is one node's policy with its address typed in, as
// kubernetes-nmstate's documentation writes them.
func staticPolicy(node, ip string) *nmstatev1.NodeNetworkConfigurationPolicy {
	return envtest.StaticAddressPolicy("static-"+node, node, ip)
}

// liveNetwork maps what a simulated node's network carries, as show
// would report it, read from the simulator's files (an uncommitted apply's
// checkpoint is live), to its interfaces; nil while a file is being
// replaced.
func liveNetwork(node string) map[netip.Addr]string {
	path := filepath.Join(dir, "nodes", node+".yaml")
	if raw, err := os.ReadFile(path + ".checkpoint"); err == nil {
		var cp struct {
			State map[string]any `json:"state"`
		}
		if yaml.Unmarshal(raw, &cp) != nil || cp.State == nil {
			return nil
		}
		state, _ := yaml.Marshal(cp.State)
		return netstate.Carriers(state)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return netstate.Carriers(raw)
}

// yamlApply creates every object of a YAML stream, as kubectl create -f
// does.
func yamlApply(stream string) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := k.Create(ctx, &u); err != nil {
			return err
		}
	}
}

// applies counts the applies a simulated node's network has taken.
func applies(node string) int { return envtest.Applies(dir, node) }

// sampleAddresses reads the nodes' networks every 20ms until ended and
// keeps the samples in which a node did not carry its address on eth1.
func sampleAddresses(want map[string]netip.Addr) *envtest.Sampler {
	return envtest.Sample(20*time.Millisecond, func() ([]string, bool) {
		var missing []string
		for node, ip := range want {
			nw := liveNetwork(node)
			if nw == nil {
				return nil, false
			}
			if nw[ip] != "eth1" {
				missing = append(missing, fmt.Sprintf("%s without %s on eth1", node, ip))
			}
		}
		return missing, true
	})
}

var _ = Describe("From one NNCP per node to one pooled policy", func() {
	It("keeps every node's address: no address changes, no moment without it, one apply per node", func() {
		const n = 10
		want := map[string]netip.Addr{}
		var nodes []string
		for i := range n {
			node := fmt.Sprintf("mig%02d", i+1)
			nodes = append(nodes, node)
			want[node] = netip.MustParseAddr(fmt.Sprintf("10.63.0.%d", 40+3*i))
			localcluster("node", "add", node, "--label", "migrate=yes")
			DeferCleanup(func() { localcluster("node", "remove", node) })
		}
		By("applying one static policy per node, as kubernetes-nmstate's documentation writes them")
		for _, node := range nodes {
			Expect(k.Create(ctx, staticPolicy(node, want[node].String()))).To(Succeed())
		}
		for _, node := range nodes {
			Eventually(trueCondition(node, "static-"+node)).Should(HavePrefix("Available"), node)
			Eventually(func() map[netip.Addr]string { return liveNetwork(node) }).Should(HaveKeyWithValue(want[node], "eth1"), node)
		}
		before := map[string]int{}
		for _, node := range nodes {
			before[node] = applies(node)
		}
		sampler := sampleAddresses(want)

		By("planning the switch with kubectl nodeippool plan")
		file := filepath.Join(GinkgoT().TempDir(), "migrate.yaml")
		Expect(os.WriteFile(file, []byte(migrationFile), 0o644)).To(Succeed())
		Expect(plugin("plan", "-f", file)).To(ContainSubstring(
			"NodeNetworkConfigurationPolicy migrate: 10 node captures, 10 keep their address, 0 renumbered"))

		By("creating the pool and the pooled policy")
		Expect(yamlApply(migrationFile)).To(Succeed())
		policyAvailable("migrate")
		for _, node := range nodes {
			Expect(held(node, "migrate", "migrate")).To(Equal([]string{want[node].String()}), node)
			// Events are written after the record, asynchronously.
			Eventually(func() []string { return events("NodeNetworkConfigurationEnactment", node+".migrate") }).Should(ContainElement(
				HavePrefix(fmt.Sprintf("AddressAdopted: NodeIPPool migrate adopted %s on eth1", want[node]))), node)
		}

		By("deleting the per-node policies")
		for _, node := range nodes {
			Expect(k.Delete(ctx, staticPolicy(node, ""))).To(Succeed())
		}
		for _, node := range nodes {
			Eventually(func() *nmstatev1.NodeNetworkConfigurationPolicy {
				p := &nmstatev1.NodeNetworkConfigurationPolicy{}
				if k.Get(ctx, client.ObjectKey{Name: "static-" + node}, p) != nil {
					return nil
				}
				return p
			}).Should(BeNil())
			Eventually(func() bool { return enactment(node, "static-"+node) == nil }).Should(BeTrue(), node)
		}
		// Long enough for a node asked for its state to have taken off
		// anything it was going to.
		Consistently(func() map[string]string {
			return addresses("migrate", "migrate", "eth1", nodes...)
		}, 5*time.Second, time.Second).Should(Equal(func() map[string]string {
			out := map[string]string{}
			for node, ip := range want {
				out[node] = ip.String()
			}
			return out
		}()))
		samples, missing := sampler.End()
		Expect(missing).To(BeEmpty())
		Expect(samples).To(BeNumerically(">", 10), "the sampler sampled every node")
		for _, node := range nodes {
			Expect(applies(node)-before[node]).To(Equal(1), "%s: the pooled policy's apply, and nothing else", node)
		}
		Expect(plugin("show", "migrate")).To(ContainSubstring("allocated  mig01"))
	})
})
