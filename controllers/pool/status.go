package pool

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// availability is a value of the Available condition.
type availability struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

var (
	reconciling    = availability{metav1.ConditionUnknown, ippoolv1.ReasonReconcilingPool, "The pool is being updated"}
	reconciledPool = availability{metav1.ConditionTrue, ippoolv1.ReasonReconciledPool, "The pool is up to date"}
)

func refused(reason, message string) availability {
	return availability{metav1.ConditionFalse, reason, message}
}

// view is what the controller knows of a pool's use: who claims which
// address, how the bitmap compares, and who waits for an address.
type view struct {
	owners poolstatus.Owners
	audit  poolstatus.Audit
	// waiting lists enactments that failed because the pool was full, as
	// "node03 (policy static-ip)"; waitingNames names them.
	waiting, waitingNames []string
	// holdings are what the view was built from.
	holdings holdings
}

// viewOf builds the view of pool from its allocator and the holdings.
func viewOf(pool string, alloc *ippool.Allocator, hs holdings) view {
	owners := poolstatus.Holders(pool, alloc.Range(), hs.records)
	waiting, names := waitingFor(pool, hs.enactments)
	return view{owners: owners, audit: poolstatus.AuditPool(pool, alloc, owners), waiting: waiting, waitingNames: names,
		holdings: hs}
}

// waitingFor describes and names the enactments Failing with
// IPPoolExhausted on pool.
func waitingFor(pool string, enactments []nncev1beta1.NodeNetworkConfigurationEnactment) (described, names []string) {
	for i := range enactments {
		e := &enactments[i]
		if exhaustedPool(e) == pool {
			described = append(described, fmt.Sprintf("%s (policy %s)", e.Labels[shared.EnactmentNodeLabel], e.Labels[shared.EnactmentPolicyLabel]))
			names = append(names, e.Name)
		}
	}
	return described, names
}

// exhaustedPool returns the pool an enactment is Failing on for want of an
// address, or "".
func exhaustedPool(e *nncev1beta1.NodeNetworkConfigurationEnactment) string {
	c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionFailing)
	if c == nil || c.Status != corev1.ConditionTrue || string(c.Reason) != ippoolv1.ReasonIPPoolExhausted {
		return ""
	}
	return e.Status.WaitingForIPPool
}

// availabilityOf decides the Available condition of a pool that may serve:
// being deleted first, then collisions, then exhaustion, else up to date.
func availabilityOf(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, v view) availability {
	switch {
	case !pool.DeletionTimestamp.IsZero():
		return refused(ippoolv1.ReasonTerminatingIPPool, fmt.Sprintf(
			"The pool is being deleted: it hands out nothing, and goes once no address is in flight (%d) or quarantined (%d)",
			len(pool.Status.InFlight), len(pool.Status.Quarantined)))
	case len(v.audit.Collisions) > 0:
		return refused(ippoolv1.ReasonIPCollision, poolstatus.CollisionMessage(pool.Name, v.owners, v.audit.Collisions))
	case len(v.waiting) > 0:
		return refused(ippoolv1.ReasonExhaustedIPPool, fmt.Sprintf(
			"The IP pool has been depleted: %d of %d addresses are allocated and %s could not get one; "+
				"grow spec.range in place within its CIDR (an earlier start, a later end, fewer excludes: every holder keeps its address), or free addresses; "+
				"if the range already fills its CIDR, create a pool over a larger CIDR and point the policies at it",
			alloc.Count(), alloc.Range().Size(), listNames(v.waiting, 5)))
	default:
		return reconciledPool
	}
}

// recognitionOf decides the IPAddressesRecognized condition of pool from
// the addresses that unrecognized IPAddresses name (Claims.Unrecognized).
func recognitionOf(pool string, owners poolstatus.Owners, unrecognized []netip.Addr) availability {
	if len(unrecognized) == 0 {
		return availability{metav1.ConditionTrue, ippoolv1.ReasonIPAddressesRecognized,
			"Every IPAddress naming the pool was made by this provider for its claim"}
	}
	var parts []string
	for _, ip := range unrecognized {
		recognized := owners.Recognized(ip)
		for _, o := range owners[ip] {
			if !o.Unrecognized {
				continue
			}
			part := fmt.Sprintf("%s names %s", o.Describe(pool), ip)
			if len(recognized) > 0 {
				part += ", held by " + recognized[0].Describe(pool)
			}
			parts = append(parts, part+" (to remove it: "+o.Remedy(pool)+")")
		}
	}
	return refused(ippoolv1.ReasonUnrecognizedIPAddress, fmt.Sprintf("%s. Such an IPAddress holds no address: it keeps a free "+
		"address from being handed out until it is deleted, or adopted by the claim it names once that claim exists "+
		"(an IPAddress restored from a backup is)", listNames(parts, 5)))
}

// listNames joins at most limit names and says how many more there are.
func listNames(names []string, limit int) string {
	if len(names) <= limit {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:limit], ", "), len(names)-limit)
}

// olderOverlapping returns the name of the oldest pool older than p whose
// range overlaps p's, or "". Age is creation time, then name.
func olderOverlapping(p *ippoolv1.NodeIPPool, rng *ippool.Range, pools []ippoolv1.NodeIPPool) string {
	for i := range pools {
		o := &pools[i]
		// A pool being deleted still counts: it goes once its holds are
		// resolved, and until then it may quarantine addresses a newer
		// pool would hand out.
		if o.UID == p.UID || !older(o, p) {
			continue
		}
		orng, err := poolstatus.Range(o)
		if err == nil && orng.Overlaps(rng) {
			return o.Name
		}
	}
	return ""
}

func older(a, b *ippoolv1.NodeIPPool) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// reportOutside tells of holders whose addresses the range no longer
// hands out: a node (an enactment, a pooled policy's node) is given a new
// address; a Cluster API claim keeps its own, since its IPAddress never
// changes and its machine carries it.
func (r rebuilder) reportOutside(pool *ippoolv1.NodeIPPool, v view) {
	var renumbered, kept []string
	for _, ip := range v.audit.Outside {
		for _, o := range v.owners.Recognized(ip) {
			part := fmt.Sprintf("%s at %s", ip, o)
			if o.Holder.Kind == holder.Claim {
				kept = append(kept, part)
			} else {
				renumbered = append(renumbered, part)
			}
		}
	}
	var says []string
	if len(renumbered) > 0 {
		says = append(says, "nodes are given a new address: "+listNames(renumbered, 10))
	}
	if len(kept) > 0 {
		says = append(says, "claims keep theirs, since an IPAddress never changes "+
			"(delete the claim, or its machine, for one of this range): "+listNames(kept, 10))
	}
	if len(says) == 0 {
		return
	}
	r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, ippoolv1.ReasonAddressOutsideRange, "Rebuild",
		"This range no longer hands out addresses that holders hold; %s", strings.Join(says, "; "))
}
