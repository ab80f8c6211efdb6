package claim

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// recognizes reports whether addr is an IPAddress the provider made for
// claim, or adopted for it (capi.Signer).
func (r *Reconciler) recognizes(claim, addr *unstructured.Unstructured) bool {
	return r.Signer.Signed(addr, claim.GetUID())
}

// adopt makes the claim's own the IPAddress that bears its name, claim and
// pool but not the provider's signature for it: one restored from a backup
// (which drops owner references and keeps no UID), or made before
// IPAddresses were signed. It does so only when the address is free for
// the claim, as if it asked for it: in the pool's range, held by no other
// record or entry, reserved for no node. It then owns, protects and signs
// the IPAddress in one write. Until then the IPAddress keeps its address
// from being handed out and holds it against nobody.
func (r *Reconciler) adopt(ctx context.Context, claim, addr *unstructured.Unstructured) (condition, bool, error) {
	a := capi.AddressOf(addr)
	var pool ippoolv1.NodeIPPool
	err := r.Client.Get(ctx, types.NamespacedName{Name: a.Pool.Name}, &pool)
	if apierrors.IsNotFound(err) {
		return notReady(capi.ReasonPoolNotReady, fmt.Sprintf("NodeIPPool %s, which IPAddress %s/%s names, does not exist: "+
			"create it, or delete the IPAddress to have the claim served again", a.Pool.Name, a.Namespace, a.Name)), false, nil
	}
	if err != nil {
		return condition{}, false, fmt.Errorf("get NodeIPPool %s: %w", a.Pool.Name, err)
	}
	if c, err := r.refusedNamespace(ctx, claim, &pool); err != nil || c != nil {
		return deref(c), false, err
	}
	if why := poolstatus.Unservable(&pool); why != "" {
		// Until the pool is rebuilt, an address a node carries unrecorded
		// is not yet quarantined for it.
		return notReady(capi.ReasonPoolNotReady, why), false, nil
	}
	own, _ := holderOf(claim)
	refuse := func(why string) (condition, bool, error) {
		return notReady(capi.ReasonAllocationFailed, fmt.Sprintf("IPAddress %s/%s names %s, and %s; it was not made by this "+
			"provider for this claim (no valid %s annotation), so it is not adopted: delete it, and the claim is given an address",
			a.Namespace, a.Name, a.IP, why, capi.ProvenanceAnnotation)), false, nil
	}
	// Any other record names the address against the adoption, an
	// unrecognized IPAddress's too: which of two would be the claim's own
	// is not known.
	owners, err := r.ownersOf(ctx, &pool, a.IP.String())
	if err != nil {
		return condition{}, false, err
	}
	if other := otherOwner(owners, pool.Name, own, holder.ForIPAddress(a.Namespace, a.Name)); other != "" {
		return refuse(other)
	}
	var why string
	ctx = audit.WithReason(ctx, "Adopted", "IPAddress "+a.Namespace+"/"+a.Name+" names it for its claim")
	_, err = r.Pools.Update(ctx, pool.Name, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		why = adoptable(p, alloc, a.IP, own)
		if why != "" {
			return false, nil
		}
		err := alloc.AllocateIP(a.IP)
		return err == nil, nil // set already: the IPAddress kept it
	}, poolwrite.Incarnation(pool.UID))
	switch {
	case poolwrite.Gone(err):
		return notReady(capi.ReasonPoolNotReady, fmt.Sprintf("NodeIPPool %s was deleted or re-created meanwhile; trying again",
			pool.Name)), true, nil
	case err != nil:
		return condition{}, false, fmt.Errorf("hold %s of NodeIPPool %s for IPAddressClaim %s/%s: %w",
			a.IP, pool.Name, claim.GetNamespace(), claim.GetName(), err)
	case why != "":
		return refuse(why)
	}
	if err := r.own(ctx, claim, addr); err != nil {
		return condition{}, false, err
	}
	if err := setAddressRef(claim, addr.GetName()); err != nil {
		return condition{}, false, err
	}
	return ready(fmt.Sprintf("%s/%d from NodeIPPool %s", a.IP, a.Prefix, a.Pool.Name)), false, nil
}

// own makes addr the claim's in one write: its controller, its finalizer
// and the provider's signature for it; and says so in an Event.
func (r *Reconciler) own(ctx context.Context, claim, addr *unstructured.Unstructured) error {
	a := capi.AddressOf(addr)
	patch := client.MergeFromWithOptions(addr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	refs := []metav1.OwnerReference{{APIVersion: claim.GetAPIVersion(), Kind: claim.GetKind(), Name: claim.GetName(),
		UID: claim.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	for _, ref := range addr.GetOwnerReferences() {
		if ref.Controller == nil || !*ref.Controller {
			refs = append(refs, ref)
		}
	}
	addr.SetOwnerReferences(refs)
	controllerutil.AddFinalizer(addr, capi.ProtectFinalizer)
	r.Signer.SetProvenance(addr, claim.GetUID())
	if err := r.Client.Patch(ctx, addr, patch); err != nil {
		return fmt.Errorf("adopt IPAddress %s/%s for its claim: %w", a.Namespace, a.Name, err)
	}
	r.Recorder.Eventf(claim, addr, corev1.EventTypeNormal, capi.ReasonAddressAdopted, "Adopt",
		"IPAddress %s/%s (%s) names this claim but was not signed by this provider for it (restored from a backup, or made "+
			"by an earlier version): adopted, it is this claim's record now", a.Namespace, a.Name, a.IP)
	return nil
}

// otherOwner says which of owners, other than the claim called holder and
// the IPAddress called self, names the address, a holder before an
// unrecognized IPAddress; "" when none does.
func otherOwner(owners []poolstatus.Owner, pool string, h, self holder.Ref) string {
	others := slices.DeleteFunc(owners, func(o poolstatus.Owner) bool { return o.Holder == h || o.Holder == self })
	slices.SortStableFunc(others, func(x, y poolstatus.Owner) int { return cmp.Compare(boolInt(x.Unrecognized), boolInt(y.Unrecognized)) })
	switch {
	case len(others) == 0:
		return ""
	case others[0].Unrecognized:
		return others[0].Describe(pool) + " names it too"
	default:
		return others[0].Describe(pool) + " holds it"
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// adoptable says why the claim called holder cannot take ip of pool p by
// adopting an IPAddress that names it, or "": it must be in the range,
// held by no entry but the claim's own, and reserved for no node.
func adoptable(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, ip netip.Addr, h holder.Ref) string {
	if _, err := alloc.Range().Assignable(ip); err != nil {
		return fmt.Sprintf("NodeIPPool %s does not hand it out (%v)", p.Name, err)
	}
	if e := poolstatus.InFlightOf(p, ip.String()); e != nil && e.HolderName() == h.String() {
		return ""
	}
	if held := heldByEntry(p, ip.String()); held != "" {
		return "it is " + held
	}
	reservations, _ := assign.Reservations(p, alloc.Range())
	for _, res := range reservations {
		if res.IP == ip {
			return fmt.Sprintf("NodeIPPool %s reserves it for %s", p.Name, res.Describe())
		}
	}
	return ""
}
