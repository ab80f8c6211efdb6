package claim_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestStaleCacheTakesNoSecondAddress: whether a claim has its IPAddress is
// read from the API server, never from the claim controller's cache. A
// cache that has not seen the IPAddress (a controller just started, a
// watch behind) would have the claim served again: a second address
// taken for it, left to be revoked, while its machine keeps the first.
func TestStaleCacheTakesNoSecondAddress(t *testing.T) {
	RegisterTestingT(t)
	var stale atomic.Bool
	var reconciled atomic.Int32 // the claim's reads from the cache while it is stale: a reconcile began
	startController(t, func(pc *envtest.PoolController) {
		pc.Claims.Client = interceptor.NewClient(envtest.WithoutWatch{Client: pc.Claims.Client}, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if !stale.Load() {
					return c.Get(ctx, key, obj, opts...)
				}
				switch obj.GetObjectKind().GroupVersionKind().Kind {
				case capi.AddressKind:
					return apierrors.NewNotFound(schema.GroupResource{Group: capi.Group, Resource: "ipaddresses"}, key.Name)
				case capi.ClaimKind:
					reconciled.Add(1)
				}
				return c.Get(ctx, key, obj, opts...)
			},
		})
	})
	createNamespace(t, "stale")
	createPool(t, "claims-stale", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.9.0/24", Start: "10.80.9.5", End: "10.80.9.9"}})
	createClaim(t, "stale", "m1", "claims-stale")
	Eventually(addressOf("stale", "m1")).Should(Equal("10.80.9.5"))
	Eventually(func() int {
		var p ippoolv1.NodeIPPool
		_ = k.Get(ctx, types.NamespacedName{Name: "claims-stale"}, &p)
		return len(p.Status.InFlight)
	}, 3*grace+15*time.Second).Should(BeZero(), "the in-flight entry is pruned once the IPAddress records the address")

	stale.Store(true)
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := newClaim("stale", "m1", "claims-stale")
		if err := k.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		c.SetLabels(map[string]string{"touched": "yes"}) // another reconcile
		return k.Update(ctx, c)
	})).To(Succeed())
	Eventually(reconciled.Load).Should(BeNumerically(">", 0), "the claim is reconciled on the stale cache")
	Consistently(bits("claims-stale"), 3*time.Second).Should(Equal([]string{"10.80.9.5"}))
}
