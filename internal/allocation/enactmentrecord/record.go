// Package enactmentrecord reads and extends the IP pool record of an enactment: the
// addresses of status.ippool, by pool, and the captured state of each
// ippool capture in status.capturedStates. Both halves must agree for an
// address to count as recorded. Handlers write whole records; the pool
// controller adds addresses it allocated for a handler.
package enactmentrecord

import (
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// Of returns the address an enactment records for an ippool capture: the
// capture's state names it and the pool's record lists it.
func Of(e *nncev1beta1.NodeNetworkConfigurationEnactment, ref capture.Ref) (capture.Address, bool) {
	cs, ok := e.Status.CapturedStates[ref.Capture]
	if !ok {
		return capture.Address{}, false
	}
	addr, ok := capture.ParseState(cs.State.Raw)
	if !ok || !slices.Contains(e.Status.IPPool[ref.Pool].Allocated, addr.IP.String()) {
		return capture.Address{}, false
	}
	return addr, true
}

// Add records addr for the capture ref in e: it lists the address under
// the pool and sets the capture's state, stamped with meta. An address the
// capture held before moves to releasing (Release).
func Add(e *nncev1beta1.NodeNetworkConfigurationEnactment, ref capture.Ref, addr capture.Address,
	meta shared.NodeNetworkConfigurationEnactmentMetaInfo) {
	if old, ok := e.Status.CapturedStates[ref.Capture]; ok {
		if prev, ok := capture.ParseState(old.State.Raw); ok && prev.IP != addr.IP {
			Release(e, prev.IP.String())
		}
	}
	if e.Status.IPPool == nil {
		e.Status.IPPool = ippoolv1.EnactmentIPPools{}
	}
	held := e.Status.IPPool[ref.Pool]
	held.Allocated = append(held.Allocated, addr.IP.String())
	held.Releasing = slices.DeleteFunc(held.Releasing, func(s string) bool { return s == addr.IP.String() })
	e.Status.IPPool[ref.Pool] = held
	if e.Status.CapturedStates == nil {
		e.Status.CapturedStates = map[string]shared.NodeNetworkConfigurationEnactmentCapturedState{}
	}
	e.Status.CapturedStates[ref.Capture] = shared.NodeNetworkConfigurationEnactmentCapturedState{
		State: shared.NewState(string(addr.State())), MetaInfo: meta,
	}
}

// NoteNotAdopted records, under pool, what the node carried that the pool
// could not give it (ippoolv1.PoolAllocation.NotAdopted); nothing when
// notAdopted is empty.
func NoteNotAdopted(e *nncev1beta1.NodeNetworkConfigurationEnactment, pool string, notAdopted []string) {
	if len(notAdopted) == 0 || e.Status.IPPool == nil {
		return
	}
	a := e.Status.IPPool[pool]
	a.NotAdopted = append(slices.Clone(a.NotAdopted), notAdopted...)
	e.Status.IPPool[pool] = a
}

// Release moves ip, wherever e lists it as allocated, to releasing: e
// still claims it, and asks the pool controller to take it back
// (ippoolv1.PoolAllocation.Releasing).
func Release(e *nncev1beta1.NodeNetworkConfigurationEnactment, ip string) {
	for pool, a := range e.Status.IPPool {
		if !slices.Contains(a.Allocated, ip) {
			continue
		}
		a.Allocated = slices.DeleteFunc(slices.Clone(a.Allocated), func(s string) bool { return s == ip })
		if a.Allocated == nil {
			a.Allocated = []string{} // the field is required
		}
		if !slices.Contains(a.Releasing, ip) {
			a.Releasing = append(slices.Clone(a.Releasing), ip)
		}
		e.Status.IPPool[pool] = a
	}
}

// Set makes allocated e's record of allocated addresses, by pool. Every
// address e held that allocated does not list moves to releasing
// (Release): a record never lets an address go by itself.
func Set(e *nncev1beta1.NodeNetworkConfigurationEnactment, allocated ippoolv1.EnactmentIPPools) {
	listed := map[string]bool{}
	for _, a := range allocated {
		for _, ip := range a.Allocated {
			listed[ip] = true
		}
	}
	out := ippoolv1.EnactmentIPPools{}
	for pool, a := range allocated {
		out[pool] = ippoolv1.PoolAllocation{Allocated: slices.Clone(a.Allocated), NotAdopted: e.Status.IPPool[pool].NotAdopted}
	}
	for pool, a := range e.Status.IPPool {
		for _, ip := range a.Held() {
			if listed[ip] {
				continue
			}
			o := out[pool]
			if o.Allocated == nil {
				o.Allocated = []string{} // the field is required
			}
			if !slices.Contains(o.Releasing, ip) {
				o.Releasing = append(o.Releasing, ip)
			}
			out[pool] = o
		}
	}
	if len(out) == 0 {
		out = nil
	}
	e.Status.IPPool = out
}

// Requested reports whether a new enactment asks the pool controller for
// addresses from pool (ippoolv1.RequestAnnotation): its handler named the
// pool when it created it and has written no status since (the policy
// controller may have queued it for a slot).
func Requested(e *nncev1beta1.NodeNetworkConfigurationEnactment, pool string) bool {
	return Requesting(e) && slices.Contains(RequestedPools(e), pool)
}

// Requesting reports whether a new enactment asks by its creation's
// request: the pool controller for addresses (see Requested), or, for a
// policy without ippool captures, the policy controller for a slot alone
// (ippoolv1.SlotRequestAnnotation). Its handler has written nothing of its
// own, and the policy controller did not abort it (status.slot.aborted; a
// slot queued or granted answers the request, which asked to apply too:
// AsksForSlot). A condition ends the request; the only one it may show
// is Pending / MaxUnavailableLimitReached, which earlier versions wrote
// from the policy controller.
func Requesting(e *nncev1beta1.NodeNetworkConfigurationEnactment) bool {
	return requests(e) && onlyQueued(e.Status.Conditions) &&
		e.Status.PolicyGeneration == 0 && e.DeletionTimestamp.IsZero() && (e.Status.Slot == nil || e.Status.Slot.Aborted == nil)
}

// RequestsAddresses reports whether a new enactment asks the pool
// controller for addresses by its creation's request
// (ippoolv1.RequestAnnotation), not for a slot alone.
func RequestsAddresses(e *nncev1beta1.NodeNetworkConfigurationEnactment) bool {
	return Requesting(e) && e.Annotations[ippoolv1.RequestAnnotation] != ""
}

// requests reports whether the enactment was created with a request.
func requests(e *nncev1beta1.NodeNetworkConfigurationEnactment) bool {
	return e.Annotations[ippoolv1.RequestAnnotation] != "" || e.Annotations[ippoolv1.SlotRequestAnnotation] != ""
}

// onlyQueued reports whether no condition is True but Pending /
// MaxUnavailableLimitReached.
func onlyQueued(list shared.ConditionList) bool {
	for _, c := range list {
		if c.Status == corev1.ConditionTrue && (c.Type != shared.NodeNetworkConfigurationEnactmentConditionPending ||
			c.Reason != shared.NodeNetworkConfigurationEnactmentConditionMaxUnavailableLimitReached) {
			return false
		}
	}
	return true
}

// AsksForSlot reports whether a new enactment asks for a maxUnavailable
// slot by its creation's request (ippoolv1.RequestAnnotation, or
// SlotRequestAnnotation for a policy without ippool captures): once the
// pool controller has recorded an address for every one of refs (its
// policy's captures; none for a slot request alone), the request asks to apply too,
// and the policy controller grants it as it grants a slot the handler
// requested (status.slot.requested). No one writes a request for the
// handler, and the handler writes none before it applies.
func AsksForSlot(e *nncev1beta1.NodeNetworkConfigurationEnactment, refs []capture.Ref) bool {
	return Requesting(e) && (e.Status.Slot == nil || e.Status.Slot.Granted == nil && e.Status.Slot.Requested.IsZero()) &&
		Complete(e, refs)
}

// GrantedOnRequest reports whether the policy controller granted the slot
// a new enactment asked for by its request (AsksForSlot) for generation of
// its policy (status.slot.policyGeneration): its handler applies that
// generation, writing its own fields for the first time with the outcome.
func GrantedOnRequest(e *nncev1beta1.NodeNetworkConfigurationEnactment, generation int64) bool {
	return grantedOnRequest(e) && e.Status.Slot.PolicyGeneration == generation
}

// GrantedForEarlier reports whether the policy controller granted a new
// enactment's request for a generation of its policy earlier than
// generation: the policy changed between the grant and the apply, or a
// policy controller of an earlier version granted it and named none. The
// request is answered, and no one will answer it again: its handler asks
// for a slot for the policy as it is, from its creation's place in the
// queue, so that a generation no one granted it (one whose rollout was
// aborted since) does not reach the node. A grant for a later generation
// than the handler sees is its cache's lag: the policy's event follows.
func GrantedForEarlier(e *nncev1beta1.NodeNetworkConfigurationEnactment, generation int64) bool {
	return grantedOnRequest(e) && e.Status.Slot.PolicyGeneration < generation
}

// grantedOnRequest reports whether a new enactment's request was granted,
// for whichever generation.
func grantedOnRequest(e *nncev1beta1.NodeNetworkConfigurationEnactment) bool {
	return requests(e) && e.Status.PolicyGeneration == 0 && e.DeletionTimestamp.IsZero() &&
		e.Status.Slot != nil && e.Status.Slot.Granted != nil && e.Status.Slot.Requested.IsZero()
}

// RequestedPools returns the pools a new enactment's request names.
func RequestedPools(e *nncev1beta1.NodeNetworkConfigurationEnactment) []string {
	v := e.Annotations[ippoolv1.RequestAnnotation]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// Complete reports whether e records an address for every ref.
func Complete(e *nncev1beta1.NodeNetworkConfigurationEnactment, refs []capture.Ref) bool {
	for _, ref := range refs {
		if _, ok := Of(e, ref); !ok {
			return false
		}
	}
	return true
}

// WaitingForSlot is the Progressing message of an enactment whose apply
// waits for a maxUnavailable slot.
const WaitingForSlot = "Waiting for the policy controller to grant a maxUnavailable slot"

// OfEarlierPolicy says whether e was created for an earlier policy of its
// policy's name, deleted and created again since (policyUID is the UID of
// the policy now): its handler names another UID in
// nmstate.io/policy-uid. One that names none (kubernetes-nmstate's, or an
// earlier handler's) is taken for the policy now.
func OfEarlierPolicy(e *nncev1beta1.NodeNetworkConfigurationEnactment, policyUID string) bool {
	uid, ok := e.Annotations[ippoolv1.PolicyUIDAnnotation]
	return ok && uid != policyUID
}
