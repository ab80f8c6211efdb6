package pool_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/probe"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestNodeDeletedWhileItsMachineRuns: an admin deletes a Node whose
// machine still runs (kubectl delete node before draining it). The pools
// free what the Node held at once: a deleted Node is evidence. The
// machine's handler, which keeps running, takes the addresses off its
// interfaces before anyone can be handed them, even though its probes,
// which read its Node, can no longer pass: a rollback would put the
// address back beside the node it is handed to.
func TestNodeDeletedWhileItsMachineRuns(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	createPool(t, "unreg", ippoolv1.IPRange{CIDR: "10.74.0.0/24", Start: "10.74.0.1", End: "10.74.0.1"})
	Eventually(available("unreg")).Should(HavePrefix("True"))
	createPolicy(t, "unreg", "unreg", "unreg")
	dir := t.TempDir()
	holder := addNodeWith(t, dir, "unreg01", "unreg", probingItsNode)
	Eventually(enactmentState("unreg01.unreg")).Should(HavePrefix("Available"))
	next := addNode(t, dir, "unreg02", "unreg")
	s := envtest.SampleNICs(t, holder, next)
	Eventually(enactmentState("unreg02.unreg")).Should(ContainSubstring("is exhausted"))

	Expect(k.Delete(ctx, newNode("unreg01", "unreg"))).To(Succeed())
	Eventually(carried(holder)).Should(BeEmpty(), "the machine of a deleted Node takes its pool's addresses off")
	Eventually(enactmentState("unreg02.unreg")).Should(HavePrefix("Available"))
	Expect(carried(next)()).To(Equal([]string{"10.74.0.1/24"}))
	Eventually(events("NodeIPPool", "unreg")).Should(ContainElement("AddressReleased: Node unreg01 took released 10.74.0.1 (eth1) off"))
	Expect(s.OnTwoNICs()).To(BeEmpty(), "one address, one NIC")
	assertIndexed("unreg")
}

// probingItsNode gives a node a probe that needs its Node, as
// node-readiness does.
func probingItsNode(nd *envtest.Node) {
	nd.Tune = func(r *handler.Reconciler) {
		r.Probes = probe.Set{Interval: 100 * time.Millisecond, Timeout: 2 * time.Second, Probes: []probe.Probe{{
			Name: "node-exists",
			Check: func(ctx context.Context) error {
				if err := k.Get(ctx, types.NamespacedName{Name: nd.Name}, &corev1.Node{}); err != nil {
					return fmt.Errorf("get node %q: %w", nd.Name, err)
				}
				return nil
			},
		}}}
	}
}
