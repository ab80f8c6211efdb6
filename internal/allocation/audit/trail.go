package audit

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
)

// Action is the action of the trail's Events.
const Action = "Audit"

// Message is the message of every line of the trail in the components'
// logs: a log store finds the trail by it (docs/audit.md).
const Message = "address holding changed"

// Trail writes changes as log lines of the schema of docs/audit.md, and
// as Events on their holders when Events is set.
type Trail struct {
	// Events records an Event on the holder of each change but Taken
	// (its Recorded or Withdrawn follows at once), related to the pool;
	// on the pool for changes no holder is named in.
	Events events.EventRecorder
}

// Record writes changes, with the logger of ctx.
func (t Trail) Record(ctx context.Context, changes []Change) {
	log := ctrl.FromContext(ctx)
	for _, c := range changes {
		log.Info(Message, "event", string(c.Event), "pool", c.Pool, "address", c.Address.String(),
			"holderKind", KindOf(c.Holder), "holder", HolderName(c.Holder), "node", c.Node,
			"reason", c.Reason, "evidence", c.Evidence)
		if t.Events == nil || c.Event == Taken {
			continue
		}
		regarding, related := Reference(c.Holder), AddressReference(c.Pool, c.Address)
		if regarding == nil {
			regarding, related = related, nil
		}
		t.Events.Eventf(regarding, related, corev1.EventTypeNormal, EventReason(c.Event), Action, "%s", c.Sentence())
	}
}

// EventReason is the reason of the Event of a change: Address and the
// event, capitalized (AddressRecorded, AddressQuarantined...).
func EventReason(e Event) string {
	return "Address" + strings.ToUpper(string(e[:1])) + string(e[1:])
}

// Sentence says the change in words, for an Event's note.
func (c Change) Sentence() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s of NodeIPPool %s %s", c.Address, c.Pool, c.Event)
	if c.Holder != (holder.Ref{}) {
		fmt.Fprintf(&b, ", holder %s", c.Holder.Title())
	}
	if c.Node != "" && c.Holder.Kind != holder.PolicyNode { // a node of a pooled policy names its node
		fmt.Fprintf(&b, " on node %s", c.Node)
	}
	if c.Reason != "" {
		fmt.Fprintf(&b, ": %s", c.Reason)
	}
	if c.Evidence != "" {
		fmt.Fprintf(&b, " (%s)", c.Evidence)
	}
	return b.String()
}

// KindOf names a holder's kind as the trail's holderKind field does; ""
// for no holder.
func KindOf(h holder.Ref) string {
	if h == (holder.Ref{}) {
		return ""
	}
	switch h.Kind {
	case holder.PolicyNode:
		return holder.PooledPolicyKind
	case holder.Claim:
		return "IPAddressClaim"
	case holder.IPAddress:
		return "IPAddress"
	}
	return "NodeNetworkConfigurationEnactment"
}

// HolderName names a holder as the trail's holder field does: the
// object's name, namespace/name for the namespaced kinds, ""
// for no holder. A pooled policy's node is the node field.
func HolderName(h holder.Ref) string {
	if h.Namespace != "" {
		return h.Namespace + "/" + h.Name
	}
	return h.Name
}

// Reference returns the object an Event about the holder's address is
// recorded on, nil for no holder.
func Reference(h holder.Ref) *corev1.ObjectReference {
	if h == (holder.Ref{}) {
		return nil
	}
	ref := &corev1.ObjectReference{Kind: KindOf(h), Namespace: h.Namespace, Name: h.Name}
	switch h.Kind {
	case holder.Claim, holder.IPAddress:
		ref.APIVersion = capi.Group + "/" + capi.Versions[0]
	case holder.PolicyNode:
		ref.APIVersion = "nmstate.io/v1"
	default:
		ref.APIVersion = "nmstate.io/v1beta1"
	}
	return ref
}

// AddressReference refers to address as a part of pool: the pool, with
// the field path spec.range{address}, as a container of a Pod is
// spec.containers{name}. The recorder of events.k8s.io folds an Event
// into an earlier one of the same objects, reason and action, whatever
// its note: the address in the reference keeps the trail's Events about
// different addresses of one holder (every node of a pooled policy, the
// captures of one enactment) or of none apart.
func AddressReference(pool string, address netip.Addr) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{APIVersion: "nmstate.io/v1", Kind: "NodeIPPool", Name: pool}
	if address.IsValid() {
		ref.FieldPath = "spec.range{" + address.String() + "}"
	}
	return ref
}

// ListReference is AddressReference of the first address names lists
// (each name an address, alone or followed by words about it: "10.0.0.4
// on node a"), or of pool alone when the first is no address: the related
// object of an Event that sums up one pass over a pool's addresses. The
// recorder folds an Event into an earlier one of the same objects (a
// reference carries the object's resourceVersion, so a pool not written
// in between, or one named without it), reason and action, and the
// series keeps the first note only: a later pass's Event about other
// addresses would be lost. A pass that names the same first address
// again folds, as a repeat should.
func ListReference(pool string, names []string) *corev1.ObjectReference {
	var first netip.Addr
	if len(names) > 0 {
		word, _, _ := strings.Cut(names[0], " ")
		first, _ = netip.ParseAddr(word)
	}
	return AddressReference(pool, first)
}
