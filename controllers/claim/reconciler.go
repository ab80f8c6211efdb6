package claim

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/carriers"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolmetrics"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// Reconciler fulfils the IPAddressClaims of NodeIPPools. Set every field.
type Reconciler struct {
	// Client reads claims, IPAddresses and pools from the manager's cache
	// and writes to the API server.
	Client client.Client
	// APIReader reads from the API server what a lagging cache could get
	// wrong: the IPAddress found missing, the states a release reads.
	APIReader client.Reader
	// Carried tells the addresses nodes carry, which a new address
	// avoids (carriers.Watch); nil reads them from the API server's watch
	// cache for each claim.
	Carried *carriers.Carriers
	// Pools writes pool statuses.
	Pools *poolwrite.Writer
	// Recorder emits Events on claims.
	Recorder events.EventRecorder
	// Clock stamps conditions and entries.
	Clock clock.Clock
	// Version is the version of the IPAM group served (capi.Served).
	Version string
	// Signer signs the IPAddresses the provider makes (capi.Signer), and
	// tells them from any other; nil signs none and counts every one.
	Signer *capi.Signer
	// ClusterVersion is the version of cluster.x-k8s.io's Cluster served,
	// "" when its CRD is not installed: no claim is paused by its Cluster
	// then.
	ClusterVersion string
	// Waiting is told which claims wait on an exhausted pool (the metric
	// nmstate_ippool_waiting_holders); nil tells nothing.
	Waiting *poolmetrics.Waiting
}

// Reconcile serves one claim: fetch → paused? → release if deleted →
// finalizer → restore, record or allocate → one status write.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	claim := capi.NewClaim(r.Version)
	if err := r.Client.Get(ctx, req.NamespacedName, claim); err != nil {
		if apierrors.IsNotFound(err) {
			r.wait(req.NamespacedName, "")
			return ctrl.Result{}, r.releaseOrphan(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !capi.PoolRefOf(claim).Ours() {
		r.wait(req.NamespacedName, "") // another provider's now
		return ctrl.Result{}, nil
	}
	why, err := r.paused(ctx, claim)
	if err != nil {
		return ctrl.Result{}, err
	}
	if why != "" {
		r.wait(req.NamespacedName, "") // a paused claim waits on its pause, not on a pool
		cs := []condition{paused(why)}
		if ref, _, _ := unstructured.NestedString(claim.Object, "status", "addressRef", "name"); ref == "" {
			// Not served yet: Ready says why.
			cs = append(cs, notReady(capi.ReasonPaused, "The claim is paused ("+why+"): it is served once it is unpaused"))
		}
		return ctrl.Result{}, r.writeStatus(ctx, claim, cs...)
	}
	if claim.GetDeletionTimestamp() != nil {
		r.wait(req.NamespacedName, "")
		return ctrl.Result{}, r.release(ctx, claim)
	}
	if !controllerutil.ContainsFinalizer(claim, capi.ReleaseFinalizer) {
		patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(claim, capi.ReleaseFinalizer)
		if err := r.Client.Patch(ctx, claim, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("add the finalizer to IPAddressClaim %s: %w", req, err)
		}
	}
	c, requeue, err := r.serve(ctx, claim)
	if err != nil {
		return ctrl.Result{}, err
	}
	if c.reason == capi.ReasonPoolExhausted {
		r.wait(req.NamespacedName, capi.PoolRefOf(claim).Name)
	} else {
		r.wait(req.NamespacedName, "")
	}
	if err := r.writeStatus(ctx, claim, paused(""), c); err != nil {
		return ctrl.Result{}, err
	}
	if requeue {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if c.carried {
		return ctrl.Result{RequeueAfter: carriedAgain}, nil
	}
	return ctrl.Result{}, nil
}

// carriedAgain is how soon a claim that waits for an address that only
// nodes' networks carry is looked at again: a node that takes it off
// writes no pool, only its state, and a Node deleted while its machine
// runs leaves a state that counts for nothing once the Node is gone.
const carriedAgain = 10 * time.Second

// wait tells Waiting that the claim key waits on pool, or on none ("").
func (r *Reconciler) wait(key types.NamespacedName, pool string) {
	h := holder.ForClaim(key.Namespace, key.Name).String()
	var waits []poolmetrics.Wait
	if pool != "" {
		waits = []poolmetrics.Wait{{Holder: h, Pool: pool}}
	}
	r.Waiting.Replace(h, waits)
}

// serve makes sure the claim has its IPAddress, and tells its Ready
// condition; requeue asks to look again soon (an IPAddress let go to be
// created again).
func (r *Reconciler) serve(ctx context.Context, claim *unstructured.Unstructured) (condition, bool, error) {
	addr, err := r.address(ctx, claim)
	if err != nil {
		return condition{}, false, err
	}
	switch {
	case addr == nil:
		return r.allocate(ctx, claim)
	case !owns(claim, addr):
		a := capi.AddressOf(addr)
		return notReady(capi.ReasonAllocationFailed, fmt.Sprintf(
			"IPAddress %s/%s exists and is not this claim's (claimRef %q, poolRef %s %s): delete or rename it",
			a.Namespace, a.Name, a.Claim, a.Pool.Kind, a.Pool.Name)), false, nil
	case !r.recognizes(claim, addr) && addr.GetDeletionTimestamp() != nil:
		return r.letGo(ctx, addr)
	case addr.GetDeletionTimestamp() != nil:
		return r.restore(ctx, claim, addr)
	case !r.recognizes(claim, addr):
		return r.adopt(ctx, claim, addr)
	}
	if err := setAddressRef(claim, addr.GetName()); err != nil {
		return condition{}, false, err
	}
	a := capi.AddressOf(addr)
	return ready(fmt.Sprintf("%s/%d from NodeIPPool %s", a.IP, a.Prefix, a.Pool.Name)), false, nil
}

// address returns the claim's IPAddress, read from the API server (the
// cache may not have seen one created a moment ago), or nil.
func (r *Reconciler) address(ctx context.Context, claim *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	addr := capi.NewAddress(r.Version)
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(claim), addr)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get IPAddress %s/%s: %w", claim.GetNamespace(), claim.GetName(), err)
	}
	return addr, nil
}

// owns reports whether addr is the claim's: it names the claim and the
// claim's pool.
func owns(claim, addr *unstructured.Unstructured) bool {
	a := capi.AddressOf(addr)
	return a.Claim == claim.GetName() && a.Pool == capi.PoolRefOf(claim)
}

// letGo lets an IPAddress being deleted go when the provider did not make
// it for the claim: it held nothing, so nothing is restored (its address
// may be another holder's), and the claim is served afresh once it is
// gone.
func (r *Reconciler) letGo(ctx context.Context, addr *unstructured.Unstructured) (condition, bool, error) {
	if err := r.removeFinalizer(ctx, addr, capi.ProtectFinalizer); err != nil {
		return condition{}, false, err
	}
	return notReady(capi.ReasonAllocationFailed, fmt.Sprintf("IPAddress %s/%s, which this provider did not make for the claim, "+
		"is being deleted: the claim is given an address once it is gone", addr.GetNamespace(), addr.GetName())), true, nil
}

// restore puts back an IPAddress deleted while its claim lives, with the
// same address: the address is written on the claim (RestoreAnnotation)
// and held by an in-flight entry, the old IPAddress is let go, and, once
// it is gone, created again as allocate creates it. A provider that
// restarts meanwhile finds the entry, or the annotation, and takes the
// same address back.
func (r *Reconciler) restore(ctx context.Context, claim, addr *unstructured.Unstructured) (condition, bool, error) {
	a := capi.AddressOf(addr)
	r.Pools.NotRecorded(a.IP.String()) // the entry holds it again
	if claim.GetAnnotations()[capi.RestoreAnnotation] != a.IP.String() {
		patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
		annotations := claim.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[capi.RestoreAnnotation] = a.IP.String()
		claim.SetAnnotations(annotations)
		if err := r.Client.Patch(ctx, claim, patch); err != nil {
			return condition{}, false, fmt.Errorf("note the address of IPAddressClaim %s/%s: %w", claim.GetNamespace(), claim.GetName(), err)
		}
	}
	h, token := holderOf(claim)
	var other string
	_, err := r.Pools.Update(ctx, a.Pool.Name, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		var changed bool
		changed, other = holdForRestore(p, alloc, ippoolv1.InFlightAddress{IP: a.IP.String(), Holder: h.String(), Token: token,
			Since: now(r.Clock)})
		return changed, nil
	})
	if err == nil && other != "" {
		// The IPAddress keeps its finalizer, and its record the address,
		// until that entry is settled (pruned, forgotten or revoked).
		return notReady(capi.ReasonAllocationFailed, fmt.Sprintf("IPAddress %s/%s is being deleted, and %s is in flight for %s "+
			"in NodeIPPool %s: it is restored once that is settled", a.Namespace, a.Name, a.IP, holder.Parse(other).Title(), a.Pool.Name)), true, nil
	}
	if apierrors.IsNotFound(err) {
		// Nothing can hold the address: the IPAddress stays, terminating,
		// and keeps its record until the pool is back or the claim goes.
		return notReady(capi.ReasonPoolNotReady, fmt.Sprintf("IPAddress %s/%s is being deleted and NodeIPPool %s is gone: "+
			"it cannot be restored; create the pool again, or delete the claim", a.Namespace, a.Name, a.Pool.Name)), false, nil
	}
	if err != nil {
		return condition{}, false, fmt.Errorf("hold %s for IPAddressClaim %s/%s: %w", a.IP, claim.GetNamespace(), claim.GetName(), err)
	}
	if err := r.removeFinalizer(ctx, addr, capi.ProtectFinalizer); err != nil {
		return condition{}, false, err
	}
	if gone, err := r.waitGone(ctx, addr); err != nil || !gone {
		return condition{}, true, err
	}
	r.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, capi.ReasonAddressRestored, "Restore",
		"IPAddress %s/%s was deleted while this claim exists: it is created again with %s", a.Namespace, a.Name, a.IP)
	return r.allocate(ctx, claim)
}

// holdForRestore holds the address of entry for the claim entry names,
// under its token, while its IPAddress is made again: an entry of the
// claim's under that token holds it already; another entry on the address
// (another holder's, or an earlier claim's of the name) is not the
// claim's to take over, and is returned in other, with nothing changed.
// The bit is set already while the IPAddress records the address.
func holdForRestore(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, entry ippoolv1.InFlightAddress) (changed bool, other string) {
	if e := poolstatus.InFlightOf(p, entry.IP); e != nil {
		if e.HolderName() == entry.Holder && e.Token == entry.Token {
			return false, ""
		}
		return false, e.HolderName()
	}
	if ip, err := netip.ParseAddr(entry.IP); err == nil {
		_ = alloc.AllocateIP(ip)
	}
	poolstatus.AddInFlight(p, entry)
	return true, ""
}

// waitGone waits, a few seconds at most, until the object addr names is
// gone (the API server deletes it once its last finalizer goes). It
// reports whether it is.
func (r *Reconciler) waitGone(ctx context.Context, addr *unstructured.Unstructured) (bool, error) {
	const step, steps = 50 * time.Millisecond, 100
	for range steps {
		fresh := capi.NewAddress(r.Version)
		err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(addr), fresh)
		switch {
		case apierrors.IsNotFound(err), err == nil && fresh.GetUID() != addr.GetUID():
			return true, nil
		case err != nil:
			return false, fmt.Errorf("get IPAddress %s/%s: %w", addr.GetNamespace(), addr.GetName(), err)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-r.Clock.After(step):
		}
	}
	return false, nil
}

// releaseOrphan releases the IPAddress of a claim that is gone without
// its release (its finalizer removed by hand): the garbage collector
// deletes such an IPAddress, and its finalizer would hold it, and its
// address, forever. The claim's absence is confirmed on the API server.
func (r *Reconciler) releaseOrphan(ctx context.Context, key types.NamespacedName) error {
	addr := capi.NewAddress(r.Version)
	if err := r.APIReader.Get(ctx, key, addr); err != nil {
		return client.IgnoreNotFound(err)
	}
	a := capi.AddressOf(addr)
	if !a.Pool.Ours() || a.Claim != key.Name {
		return nil
	}
	if err := r.APIReader.Get(ctx, key, capi.NewClaim(r.Version)); !apierrors.IsNotFound(err) {
		return err // the claim exists after all (nil), or cannot be read
	}
	orphan := capi.NewClaim(r.Version)
	orphan.SetNamespace(key.Namespace)
	orphan.SetName(key.Name)
	if err := r.quarantine(ctx, orphan, a, false); err != nil {
		return err
	}
	if err := r.removeFinalizer(ctx, addr, capi.ProtectFinalizer); err != nil {
		return err
	}
	if err := r.Client.Delete(ctx, addr); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete IPAddress %s/%s: %w", addr.GetNamespace(), addr.GetName(), err)
	}
	return nil
}

// release quarantines the address of a claim being deleted, deletes its
// IPAddress, and lets the claim go. An address still in flight (taken, no
// IPAddress yet) is left to the pool controller: its entry is forgotten
// and its bit collected once no record and no node holds it.
func (r *Reconciler) release(ctx context.Context, claim *unstructured.Unstructured) error {
	if !controllerutil.ContainsFinalizer(claim, capi.ReleaseFinalizer) {
		return nil
	}
	addr, err := r.address(ctx, claim)
	if err != nil {
		return err
	}
	if addr != nil && owns(claim, addr) {
		if err := r.quarantine(ctx, claim, capi.AddressOf(addr), r.recognizes(claim, addr)); err != nil {
			return err
		}
		if err := r.removeFinalizer(ctx, addr, capi.ProtectFinalizer); err != nil {
			return err
		}
		if err := r.Client.Delete(ctx, addr); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete IPAddress %s/%s: %w", addr.GetNamespace(), addr.GetName(), err)
		}
	}
	return r.removeFinalizer(ctx, claim, capi.ReleaseFinalizer)
}

// quarantine keeps a released claim's address from everyone until the
// pool controller has evidence that no NIC carries it: the node whose
// NodeNetworkState shows it (a machine that joined the cluster) is its
// holder; when no node shows it, none is known to carry it. An IPAddress
// the provider did not make for the claim (recognized false) quarantines
// its address only when no other holder's record holds it: it must not
// take an address from its holder.
func (r *Reconciler) quarantine(ctx context.Context, claim *unstructured.Unstructured, a capi.Address, recognized bool) error {
	if !recognized {
		// From the API server: a cache that has not seen the pool would
		// skip the check, and the quarantine would name the claim on
		// another holder's address.
		var pool ippoolv1.NodeIPPool
		err := r.APIReader.Get(ctx, types.NamespacedName{Name: a.Pool.Name}, &pool)
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("get NodeIPPool %s: %w", a.Pool.Name, err)
		}
		if err == nil {
			holder, _ := holderOf(claim)
			other, err := r.otherHolder(ctx, &pool, holder, a.IP.String())
			if err != nil {
				return err
			}
			if other != "" {
				ctrl.LoggerFrom(ctx).Info("not releasing an address the IPAddress did not hold", "pool", a.Pool.Name,
					"ip", a.IP.String(), "holder", other)
				return nil
			}
		}
	}
	carrier, err := carrierOf(ctx, r.APIReader, a.IP)
	if err != nil {
		return err
	}
	holder, _ := holderOf(claim)
	if _, err := lifecycle.Release(ctx, r.Pools, lifecycle.OfClaim(holder, carrier, a.Pool.Name, a.IP)); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("released address", "pool", a.Pool.Name, "ip", a.IP.String(), "node", carrier)
	return nil
}

// removeFinalizer removes finalizer from o, under its resourceVersion.
func (r *Reconciler) removeFinalizer(ctx context.Context, o *unstructured.Unstructured, finalizer string) error {
	if !controllerutil.ContainsFinalizer(o, finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(o.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(o, finalizer)
	if err := r.Client.Patch(ctx, o, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove finalizer %s from %s %s/%s: %w", finalizer, o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

// writeStatus sets cs on the claim and writes its status if that changed
// anything, under its resourceVersion.
func (r *Reconciler) writeStatus(ctx context.Context, claim *unstructured.Unstructured, cs ...condition) error {
	before := claim.DeepCopy()
	setConditions(claim, r.Version, r.Clock.Now(), cs...)
	if equalStatus(before, claim) {
		return nil
	}
	for _, c := range cs {
		if c.typ == capi.ConditionReady && transitioned(before, c) {
			kind := corev1.EventTypeNormal
			if c.status != "True" {
				kind = corev1.EventTypeWarning
			}
			r.Recorder.Eventf(claim, nil, kind, c.reason, "Allocate", "%s", c.message)
		}
	}
	if err := r.Client.Status().Update(ctx, claim); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return client.IgnoreNotFound(errRetry(err))
		}
		return fmt.Errorf("write the status of IPAddressClaim %s/%s: %w", claim.GetNamespace(), claim.GetName(), err)
	}
	return nil
}

// errRetry makes a conflict an error that requeues quietly.
func errRetry(err error) error {
	if apierrors.IsConflict(err) {
		return fmt.Errorf("the claim changed meanwhile, looking again: %w", err)
	}
	return err
}

// paused says why the claim is paused (its annotation, or its Cluster's
// spec.paused), or "". A Cluster missing from the cache is looked for on
// the API server.
func (r *Reconciler) paused(ctx context.Context, claim *unstructured.Unstructured) (string, error) {
	if _, ok := claim.GetAnnotations()[capi.PausedAnnotation]; ok {
		return "annotation " + capi.PausedAnnotation + " on the claim", nil
	}
	name := capi.ClusterOf(claim)
	if name == "" || r.ClusterVersion == "" {
		return "", nil
	}
	cluster := capi.NewCluster(r.ClusterVersion)
	key := types.NamespacedName{Namespace: claim.GetNamespace(), Name: name}
	err := r.Client.Get(ctx, key, cluster)
	if apierrors.IsNotFound(err) {
		// A Cluster created just before its claims may not be in the
		// cache yet: a claim is served only if the API server has no
		// Cluster either, never on a cache's miss.
		err = r.APIReader.Get(ctx, key, cluster)
	}
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("get Cluster %s/%s: %w", claim.GetNamespace(), name, err)
	}
	if p, _, _ := unstructured.NestedBool(cluster.Object, "spec", "paused"); p {
		return "Cluster " + name + " has spec.paused", nil
	}
	return "", nil
}

// holderOf names the claim where entries name their holder, and its token.
func holderOf(claim *unstructured.Unstructured) (h holder.Ref, token string) {
	return holder.ForClaim(claim.GetNamespace(), claim.GetName()), string(claim.GetUID())
}

// askOf is the claim's ask of its pool (assign.Ask): one address, for no
// capture, under its token.
func askOf(claim *unstructured.Unstructured) assign.Ask {
	h, token := holderOf(claim)
	return assign.Ask{Asker: assign.Asker{Holder: h}, Captures: []string{""}, Token: token}
}
