package pool_test

import (
	"strings"
	"testing"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/enactment"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/policy"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestWhoWritesWhat keeps docs/protocol.md's table "Who writes what" true:
// over a rollout to two nodes of a policy that draws from a pool, a reset,
// the pool created again over a range without the nodes' addresses (each
// replaced, the old one released) and the policy's deletion, served by the pool controller and allocated
// by the handlers (--self-allocate), every part of an enactment that the
// API server's managedFields show a writer owning is a part the table
// names, and that writer is one its row names; likewise every part of the
// pool, with the table "part of a pool". Each controller writes under its
// own field manager (FieldOwner; the pool writes of the pool controller's
// process under pool.FieldOwner), so the API server, not the code under
// test, says who wrote what.
func TestWhoWritesWhat(t *testing.T) {
	for _, tc := range []struct {
		name, net string
		tune      func(*handler.Reconciler)
	}{
		{"writers", "10.14.0", func(*handler.Reconciler) {}},
		{"writersself", "10.14.1", func(r *handler.Reconciler) { r.SelfAllocate = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			RegisterTestingT(t)
			name := tc.name
			table, err := envtest.WritersTable("part of an enactment", writers...)
			Expect(err).NotTo(HaveOccurred())
			Expect(table).To(HaveKey("status.slot.granted"), "the table was read")
			ws, err := envtest.WatchWriters(ctx, env.Config, k.Scheme(), &nncev1beta1.NodeNetworkConfigurationEnactmentList{},
				func(o metav1.Object) bool { return strings.HasSuffix(o.GetName(), "."+name) }, "slot", "ippool[*]")
			Expect(err).NotTo(HaveOccurred())
			poolWriters, err := envtest.WatchWriters(ctx, env.Config, k.Scheme(), &ippoolv1.NodeIPPoolList{},
				func(o metav1.Object) bool { return o.GetName() == name })
			Expect(err).NotTo(HaveOccurred())

			twoNodesOf(t, name, ippoolv1.IPRange{CIDR: tc.net + ".0/24", Start: tc.net + ".1", End: tc.net + ".10"},
				func(nd *envtest.Node) { nd.Tune = tc.tune })
			e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: name + "02." + name}}
			before := held(e.Name, name)
			annotate(e, name)
			Eventually(func() []string { return held(e.Name, name) }).ShouldNot(Or(BeEmpty(), Equal(before)))
			Eventually(enactmentState(e.Name)).Should(HavePrefix("Available"))
			// The pool created again over a range without the nodes'
			// addresses: each is replaced, and the old one released.
			deleteObject(&ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}})
			createPool(t, name, ippoolv1.IPRange{CIDR: tc.net + ".0/24", Start: tc.net + ".100", End: tc.net + ".110"})
			for _, enactment := range []string{name + "01." + name, name + "02." + name} {
				Eventually(func() ippoolv1.PoolAllocation {
					var got nncev1beta1.NodeNetworkConfigurationEnactment
					Expect(k.Get(ctx, client.ObjectKey{Name: enactment}, &got)).To(Succeed())
					return got.Status.IPPool[name]
				}).Should(And(HaveField("Allocated", ConsistOf(HavePrefix(tc.net+".1"))), HaveField("Releasing", BeEmpty())),
					"replaced inside the new range, the old address released")
			}
			deleteObject(&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})
			for _, enactment := range []string{name + "01." + name, name + "02." + name} {
				Eventually(func() bool {
					return apierrors.IsNotFound(k.Get(ctx, client.ObjectKey{Name: enactment}, &nncev1beta1.NodeNetworkConfigurationEnactment{}))
				}).Should(BeTrue(), "retired with its policy")
			}

			seen, problems := ws.Check("NodeNetworkConfigurationEnactment", "part of an enactment", writers, writerOf)
			for _, msg := range problems {
				t.Error(msg)
			}
			Expect(seen).To(HaveKey("status.ippool[*].allocated"), "the watch saw the records written")
			Expect(seen).To(HaveKey("status.ippool[*].releasing"), "and the releases")

			seen, problems = poolWriters.Check("NodeIPPool", "part of a pool", writers, writerOf)
			for _, msg := range problems {
				t.Error(msg)
			}
			Expect(seen).To(HaveKey("status.quarantined"), "the watch saw the releases in the pool")
			if tc.name == "writersself" {
				Expect(seen["status.inFlight"]).To(HaveKey(handler.FieldOwner), "and the handlers' own takes")
			}
		})
	}
}

// writers are the writers the table names.
var writers = []string{"handler", "pool controller", "policy controller", "admin"}

// writerOf names the writer whose field manager is m, as the table does:
// the pool controller's process runs the pool and enactment controllers
// (and the policy controller, which the table names apart); anyone else
// is an admin.
func writerOf(m string) string {
	switch m {
	case handler.FieldOwner:
		return "handler"
	case pool.FieldOwner, enactment.FieldOwner:
		return "pool controller"
	case policy.FieldOwner:
		return "policy controller"
	}
	return "admin"
}
