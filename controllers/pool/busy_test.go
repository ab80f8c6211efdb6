package pool_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestBusyPoolGetsItsFinalizer starts a pool controller on a new pool that
// another writer changes in the window of every one of the controller's
// first fifteen finalizer patches (handlers write a pool's status many times
// a second while fifty of them allocate). The controller reads the pool
// again and retries, as every guarded pool write does, and the pool becomes
// available. Before, each conflict failed the reconcile: the workqueue's
// exponential backoff then put the pool's next look minutes away (a race of
// 50 handlers saw one pool go unserved for two and a half minutes).
func TestBusyPoolGetsItsFinalizer(t *testing.T) {
	RegisterTestingT(t)
	const name, bumps = "busy", 15
	var bumped atomic.Int32
	pc, err := env.StartPoolController(grace, nil, func(pc *envtest.PoolController) {
		pc.Pools.Client = interceptor.NewClient(envtest.WithoutWatch{Client: pc.Pools.Client}, interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if p, ok := obj.(*ippoolv1.NodeIPPool); ok && p.Name == name && bumped.Load() < bumps {
					bumped.Add(1)
					touch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"example.com/touched":"%d"}}}`, bumped.Load()))
					Expect(c.Patch(ctx, p.DeepCopy(), touch)).To(Succeed())
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
		})
	})
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
	// The excludes are slices the controller must not lose while it
	// copies what it read over its cached copy.
	createPool(t, name, ippoolv1.IPRange{CIDR: "10.79.0.0/28", Exclude: []string{"10.79.0.8/30"}})
	Eventually(available(name)).Should(HavePrefix("True"))
	Expect(bumped.Load()).To(BeNumerically("==", bumps), "every patch met another writer")
	var p ippoolv1.NodeIPPool
	Expect(k.Get(ctx, types.NamespacedName{Name: name}, &p)).To(Succeed())
	Expect(p.Finalizers).To(ContainElement(ippoolv1.FinalizerPoolEntries))
	Consistently(available(name), grace).Should(HavePrefix("True"), "the pool as read stays the pool as written")
}
