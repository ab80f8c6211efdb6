package claim_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/capi"
)

// TestCascadingDeletions: a claim deleted with --cascade=foreground (the
// garbage collector deletes its IPAddress first, and keeps the claim until
// that is gone) or --cascade=orphan (it takes the claim's ownership off
// its IPAddress first) is released as a plain deletion is: its IPAddress
// goes, its address is free again (no node carries it), no IPAddress is
// made again for it, and the claim goes. envtest runs no garbage
// collector: the test plays it, racing the controller as it does.
func TestCascadingDeletions(t *testing.T) {
	begin(t, "cascade", "claims-cascade", ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.80.11.0/24", Start: "10.80.11.1", End: "10.80.11.9"}})
	for _, tc := range []struct {
		name   string
		policy metav1.DeletionPropagation
		// collect is one pass of the garbage collector over the claim
		// being deleted and its IPAddress (nil when gone).
		collect func(claim, addr *unstructured.Unstructured) error
	}{
		{"foreground", metav1.DeletePropagationForeground, func(claim, addr *unstructured.Unstructured) error {
			if addr != nil && ownedBy(addr, claim) {
				return client.IgnoreNotFound(k.Delete(ctx, addr, client.PropagationPolicy(metav1.DeletePropagationBackground)))
			}
			return dropFinalizer(claim, metav1.FinalizerDeleteDependents)
		}},
		{"orphan", metav1.DeletePropagationOrphan, func(claim, addr *unstructured.Unstructured) error {
			if addr != nil && ownedBy(addr, claim) {
				addr.SetOwnerReferences(slices.DeleteFunc(addr.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == claim.GetUID() }))
				return client.IgnoreNotFound(k.Update(ctx, addr))
			}
			return dropFinalizer(claim, metav1.FinalizerOrphanDependents)
		}},
	} {
		createClaim(t, "cascade", tc.name, "claims-cascade")
		Eventually(addressOf("cascade", tc.name)).Should(HavePrefix("10.80.11."), tc.name)
		ip := addressOf("cascade", tc.name)()
		Expect(bits("claims-cascade")()).To(ContainElement(ip))

		Expect(k.Delete(ctx, newClaim("cascade", tc.name, "claims-cascade"), client.PropagationPolicy(tc.policy))).To(Succeed())
		key := types.NamespacedName{Namespace: "cascade", Name: tc.name}
		Eventually(func() error {
			claim := capi.NewClaim(version)
			err := k.Get(ctx, key, claim)
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			addr, err := getAddress("cascade", tc.name)
			if apierrors.IsNotFound(err) {
				addr, err = nil, nil
			}
			if err != nil {
				return err
			}
			if err := tc.collect(claim, addr); err != nil && !apierrors.IsConflict(err) {
				return err
			}
			return errStillThere
		}).Should(Succeed(), "%s: the claim goes", tc.name)
		gone := func() error { _, err := getAddress("cascade", tc.name); return err }
		Eventually(gone).Should(MatchError(ContainSubstring("not found")), "%s: its IPAddress goes", tc.name)
		Consistently(gone, 2*time.Second).Should(MatchError(ContainSubstring("not found")), "%s: and is not made again", tc.name)
		Eventually(bits("claims-cascade")).ShouldNot(ContainElement(ip), "%s: no node carries %s: free", tc.name, ip)
		Expect(quarantined("claims-cascade")()).To(BeEmpty())
	}
}

// errStillThere keeps an Eventually polling while the claim exists.
var errStillThere = errors.New("the claim is still there")

// ownedBy reports whether o names owner among its owners.
func ownedBy(o, owner *unstructured.Unstructured) bool {
	return slices.ContainsFunc(o.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == owner.GetUID() })
}

// dropFinalizer removes finalizer from o, as the garbage collector does
// once it is done with o's dependents.
func dropFinalizer(o *unstructured.Unstructured, finalizer string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fresh := capi.NewClaim(version)
		if err := k.Get(ctx, client.ObjectKeyFromObject(o), fresh); err != nil {
			return client.IgnoreNotFound(err)
		}
		if !slices.Contains(fresh.GetFinalizers(), finalizer) {
			return nil
		}
		fresh.SetFinalizers(slices.DeleteFunc(fresh.GetFinalizers(), func(f string) bool { return f == finalizer }))
		return client.IgnoreNotFound(k.Update(ctx, fresh))
	})
}
