package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
)

// Settlement is what becomes of an in-flight entry that the pool
// controller looks at: one whose holder records the address, whose holder
// is gone, left unrecorded past the grace period, or in a pool being
// deleted.
type Settlement int

const (
	// Wait leaves the entry for the next look: the holder may record the
	// address yet, or just changed.
	Wait Settlement = iota
	// Prune removes the entry: the holder's record names the address.
	Prune
	// Forget removes the entry and leaves the bit: no record can be
	// written under the entry's token any more (its holder is gone or
	// moved past it), but one may have been written and removed since,
	// with a quarantine on its way. Garbage collection frees the bit after
	// its grace period if nothing holds it.
	Forget
	// Revoke removes the entry and frees the bit: the holder's record was
	// fenced, so it never named the address under the token and now never
	// can.
	Revoke
)

// Entry is an in-flight entry as the pool controller sees it when it
// settles it.
type Entry struct {
	ippoolv1.InFlightAddress
	// Recorded: the holder's record (holder.List) names the address.
	Recorded bool
	// Exists: the holder exists (holder.List, or its enactment).
	Exists bool
}

// Settler settles in-flight entries (Settle): the one rule of taking an
// address, for every kind of holder, on what the API server says. A
// holder writes its record only under the token of its entry; the
// Settler makes sure that a writer that stalled between its pool write
// and its record cannot record an address the pool handed out again.
type Settler struct {
	// Client writes fences.
	Client client.Client
	// Reader reads the holders' records from the API server: a fence
	// decided on a cache could fence nothing.
	Reader client.Reader
	// Recorder tells of revocations, on the fenced object.
	Recorder events.EventRecorder
	// Clock says how long an entry was in flight.
	Clock clock.PassiveClock
	// IPAMVersion is the version of the Cluster API IPAM group served, ""
	// when none is: then no claim holds an address.
	IPAMVersion string
}

// Settle decides what becomes of e, an entry of pool, by one rule for
// every kind of holder:
//
//  1. an entry the holder's kind keeps (a claim's, while its IPAddress
//     may still be created with the address) waits, whatever else;
//  2. an entry whose holder records the address is pruned;
//  3. one whose holder is gone is forgotten;
//  4. otherwise the holder's record is fenced, if its kind can be (an
//     enactment, a pooled policy's node: their records are written under
//     the token, the resourceVersion of the object they live in), and the
//     entry revoked; a kind whose record is created unconditionally (a
//     claim's IPAddress), which step 1 kept while it could be, forgets it.
//
// It reads from the API server, and writes nothing but a fence.
func (s Settler) Settle(ctx context.Context, pool *ippoolv1.NodeIPPool, e Entry) (Settlement, error) {
	k := s.kindOf(holder.Parse(e.HolderName()))
	kept, err := k.keeps(ctx, e)
	switch {
	case err != nil:
		return Wait, err
	case kept:
		return Wait, nil
	case e.Recorded:
		return Prune, nil
	case !e.Exists:
		return Forget, nil
	}
	return k.fence(ctx, pool, e.InFlightAddress)
}

// kind is one kind of holder's part in settling its entries.
type kind interface {
	// keeps reports whether e must stay whatever its holder's record
	// says, read from the API server.
	keeps(ctx context.Context, e Entry) (bool, error)
	// fence makes sure the record of an existing holder that does not
	// record e can never record it: Revoke once fenced, Forget when the
	// token is dead already, Wait when the record changed meanwhile.
	fence(ctx context.Context, pool *ippoolv1.NodeIPPool, e ippoolv1.InFlightAddress) (Settlement, error)
}

// kindOf returns the part of h's kind.
func (s Settler) kindOf(h holder.Ref) kind {
	switch h.Kind {
	case holder.Enactment:
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: h.Name}}
		return fenced{s: s, obj: e, name: fmt.Sprintf("enactment %q", h.Name),
			whom: "this enactment", then: "its handler allocates again",
			recorded: func() ippoolv1.EnactmentIPPools { return e.Status.IPPool }}
	case holder.PolicyNode:
		p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: h.Name}}
		return fenced{s: s, obj: p, name: fmt.Sprintf("%s %q", holder.PooledPolicyKind, h.Name),
			whom: "node " + h.Node, then: "the node gets an address again",
			recorded: func() ippoolv1.EnactmentIPPools {
				if rec := p.Status.NodeOf(h.Node); rec != nil {
					return rec.Record()
				}
				return nil
			}}
	case holder.Claim:
		return claimed{s: s, h: h}
	}
	return claimed{s: s} // no entry names an IPAddress: nothing to keep or fence
}

// fenced is a kind whose record lives in an object it writes under the
// token, the object's resourceVersion: an enactment's status.ippool, a
// pooled policy's status.nodes.
type fenced struct {
	s   Settler
	obj client.Object
	// name names the object in errors; whom names the holder, and then
	// what comes next, in the Event.
	name, whom, then string
	// recorded returns the record of the holder, once obj is read.
	recorded func() ippoolv1.EnactmentIPPools
}

func (fenced) keeps(context.Context, Entry) (bool, error) { return false, nil }

// fence writes the FenceAnnotation on the object under the token, so that
// any record written under it fails. If the object is gone or changed
// since, the token is dead already; a conflict means it just changed,
// maybe to record the address.
func (f fenced) fence(ctx context.Context, pool *ippoolv1.NodeIPPool, e ippoolv1.InFlightAddress) (Settlement, error) {
	err := f.s.Reader.Get(ctx, client.ObjectKeyFromObject(f.obj), f.obj)
	switch {
	case apierrors.IsNotFound(err):
		return Forget, nil
	case err != nil:
		return Wait, fmt.Errorf("get %s: %w", f.name, err)
	case slices.Contains(f.recorded().Held(), e.IP):
		return Wait, nil // recorded after all: pruned on the next look
	case f.obj.GetResourceVersion() != e.Token:
		return Forget, nil
	}
	patch := client.MergeFromWithOptions(f.obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	annotations := f.obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	// The token makes every fence a new value: a fence that left the
	// object as it was would not move its resourceVersion.
	annotations[ippoolv1.FenceAnnotation] = ippoolv1.FenceValue(pool.Name, e.IP, e.Token)
	f.obj.SetAnnotations(annotations)
	if err := f.s.Client.Patch(ctx, f.obj, patch); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return Forget, nil
		case apierrors.IsConflict(err):
			return Wait, nil
		}
		return Wait, fmt.Errorf("fence %s: %w", f.name, err)
	}
	f.s.Recorder.Eventf(f.obj, pool, corev1.EventTypeWarning, ippoolv1.ReasonAllocationRevoked, "Revoke",
		"NodeIPPool %s revoked %s: taken for %s %s ago and never recorded; %s",
		pool.Name, e.IP, f.whom, f.s.Clock.Since(e.Since.Time).Round(time.Second), f.then)
	return Revoke, nil
}

// claimed is a Cluster API claim, whose record is an IPAddress the claim
// controller creates: no write can be made conditional on a token, so no
// fence could stop a late one, and the entry is the claim's hold instead
// for as long as a late one may come.
type claimed struct {
	s Settler
	h holder.Ref
}

// keeps reports whether e is the only hold of a claim on its address: the
// claim, read from the API server, has the entry's UID as token, and
// either names the entry's address in its restore annotation (its
// IPAddress was deleted and is being created again: the machine the claim
// serves was given that address and may carry it whatever happens to the
// IPAddress) or has no IPAddress yet (a pass that stalled between its
// pool write and the creation of the IPAddress: if the entry went, the
// address could be handed to another holder before the late IPAddress
// names it too). The annotation alone holds nothing: only the entry the
// controller wrote does.
func (c claimed) keeps(ctx context.Context, e Entry) (bool, error) {
	if c.h.Kind != holder.Claim || c.s.IPAMVersion == "" {
		return false, nil
	}
	key := types.NamespacedName{Namespace: c.h.Namespace, Name: c.h.Name}
	claim := capi.NewClaim(c.s.IPAMVersion)
	err := c.s.Reader.Get(ctx, key, claim)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get IPAddressClaim %s: %w", key, err)
	case string(claim.GetUID()) != e.Token:
		return false, nil
	case claim.GetAnnotations()[capi.RestoreAnnotation] == e.IP:
		return true, nil
	case e.Recorded:
		return false, nil
	}
	addr := capi.NewAddress(c.s.IPAMVersion)
	err = c.s.Reader.Get(ctx, key, addr)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("get IPAddress %s: %w", key, err)
	}
	// Created a moment ago with this address (pruned once the cache has
	// it), or with another: then the entry is left over.
	return capi.AddressOf(addr).IP.String() == e.IP, nil
}

// fence forgets the entry: keeps held it while the claim could still
// record the address; the bit stays for garbage collection.
func (claimed) fence(context.Context, *ippoolv1.NodeIPPool, ippoolv1.InFlightAddress) (Settlement, error) {
	return Forget, nil
}
