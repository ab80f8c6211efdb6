package pool_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestPoolDeletedWithoutController: a pool deleted while no pool
// controller runs stays, its finalizer held and its status as it was, and
// hands out nothing: a self-allocating handler whose node joins takes no
// address from it, on its deletion alone (its Available condition, which
// only the controller writes, still says True). Once a pool controller
// runs, the pool goes.
func TestPoolDeletedWithoutController(t *testing.T) {
	RegisterTestingT(t)
	createIdlePool(t, "nopc", "10.61.9.0/24")
	var p ippoolv1.NodeIPPool
	Expect(k.Get(ctx, types.NamespacedName{Name: "nopc"}, &p)).To(Succeed())
	Expect(p.Finalizers).To(ContainElement(ippoolv1.FinalizerPoolEntries))
	Expect(k.Delete(ctx, &p)).To(Succeed())
	createPolicyWith(t, "nopc", "nopc", map[string]string{"addr": "ippool.nopc.allocate"}, envtest.OneAddressState)
	nd := addNodeWith(t, t.TempDir(), "nopc01", "nopc", func(nd *envtest.Node) {
		nd.Tune = func(r *handler.Reconciler) { r.SelfAllocate = true }
	})
	Eventually(enactmentState("nopc01.nopc")).Should(ContainSubstring(`NodeIPPool "nopc" is being deleted and hands out nothing`))
	Consistently(func() string {
		var now ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: "nopc"}, &now); err != nil {
			return err.Error()
		}
		return fmt.Sprintf("deleting %t, finalizers %v, allocated %d, in flight %d, Available %s", !now.DeletionTimestamp.IsZero(),
			now.Finalizers, now.Status.Allocated, len(now.Status.InFlight), available("nopc")())
	}, 2*time.Second).Should(HavePrefix(fmt.Sprintf("deleting true, finalizers [%s], allocated 0, in flight 0, Available True",
		ippoolv1.FinalizerPoolEntries)))
	Expect(nd.Network.Applies.Load()).To(BeZero(), "nothing to apply without an address")

	startController(t, nil)
	Eventually(func() bool {
		return apierrors.IsNotFound(k.Get(ctx, types.NamespacedName{Name: "nopc"}, &ippoolv1.NodeIPPool{}))
	}).Should(BeTrue(), "the pool goes once a controller runs")
	Eventually(enactmentState("nopc01.nopc")).Should(ContainSubstring(`NodeIPPool "nopc" not found`))
}
