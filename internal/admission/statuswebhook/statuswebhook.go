// Package statuswebhook is the admission webhook, served by the pool
// controller, that keeps a handler started with --self-allocate to its own
// node's part of a NodeIPPool's status.
//
// With deploy/self-allocate every handler's credentials may write the
// status of every pool (they are allocation writers), and root on any node
// holds them. A pool's status is one object, a bitmap and lists, which an
// admission policy in CEL cannot decode; this webhook decodes the old and
// the new status and admits a write by credentials bound to node N (the
// token's authentication.kubernetes.io/node-name claim), other than the
// pool controller's own, only when everything it changes is N's:
//
//   - in-flight entries added or removed name enactments of N (labelled
//     nmstate.io/node=N, which the handler admission policy keeps true);
//   - a bit cleared is the address of an in-flight entry of N it removes
//     (a withdrawal);
//   - a bit set is the address of an in-flight entry of N it adds, of an
//     address N's enactments record under the pool, or of a quarantine it
//     adds;
//   - a quarantine removed or changed is N's (its return, its adoption of
//     what it carries); one added is N's release of its own address, or
//     the hold of what N carries that an entry N withdraws came from;
//   - an in-flight entry N adds names as its origin (Returning, Kept)
//     only the quarantine of N's or the kept entry of its address that
//     the same write lifts or takes;
//   - an address kept for a node's return is taken only by an in-flight
//     entry of N that names it, and none is added or changed;
//   - the conditions and the observed generation are the pool
//     controller's.
//
// Anything else a taken node could use to make the pool hand out an
// address in use (clear another's bit, drop another's entry, quarantine or
// kept address, or plant an entry for another node's enactment) is refused,
// with a message that says what. Credentials bound to no node (an admin's)
// are left to the allocation-state policy.
package statuswebhook

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// Path is where the pool controller serves the webhook;
// deploy/self-allocate names it.
const Path = "/validate-nodeippool-status"

// NodeClaim is the key, in a request's user extra, of the node a
// service-account token is bound to.
const NodeClaim = "authentication.kubernetes.io/node-name"

// Validator admits writes of NodeIPPool status. It is safe for concurrent
// use.
type Validator struct {
	// Reader lists the enactments of the writer's node from the API server.
	Reader client.Reader
	// Decoder decodes the request's objects.
	Decoder admission.Decoder
	// Self is the user the pool controller authenticates as: its own
	// writes, node-bound in a pod, are its to make.
	Self string
}

// WhoAmI returns the user cfg authenticates as, as the API server sees it
// (a SelfSubjectReview, which every authenticated user may make): the
// Validator's Self.
func WhoAmI(ctx context.Context, cfg *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("ask the API server who the pool controller is (SelfSubjectReview): %w", err)
	}
	return review.Status.UserInfo.Username, nil
}

// Handle admits a write of a pool's status by node-bound credentials only
// when it changes nothing but the node's own entries (see the package
// doc). A failed read is an error: the configuration fails closed.
func (v *Validator) Handle(ctx context.Context, req admission.Request) admission.Response {
	nodes := req.UserInfo.Extra[NodeClaim]
	if req.Operation != admissionv1.Update || len(nodes) != 1 || req.UserInfo.Username == v.Self {
		return admission.Allowed("")
	}
	node := nodes[0]
	var older, newer ippoolv1.NodeIPPool
	if err := v.Decoder.DecodeRaw(req.OldObject, &older); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if err := v.Decoder.DecodeRaw(req.Object, &newer); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := v.Reader.List(ctx, &list, client.MatchingLabels{shared.EnactmentNodeLabel: node}); err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("list the enactments of node %s: %w", node, err))
	}
	if problems := Foreign(&older, &newer, node, list.Items); len(problems) > 0 {
		return admission.Denied(fmt.Sprintf("%s (node %s) may change in the status of NodeIPPool %s only its own node's entries: %s",
			req.UserInfo.Username, node, newer.Name, strings.Join(problems, "; ")))
	}
	return admission.Allowed("")
}

// Foreign returns what the change of a pool's status from older to newer,
// written by node, changes that is not node's, as phrases; none when all
// of it is. enactments are node's.
func Foreign(older, newer *ippoolv1.NodeIPPool, node string, enactments []nncev1beta1.NodeNetworkConfigurationEnactment) []string {
	// Entries compare by their holder, however named: a writer names
	// every entry's in both fields, those written before holder existed
	// included.
	older, newer = mirrored(older), mirrored(newer)
	var out []string
	own := map[string]bool{}
	recorded := map[netip.Addr]bool{}
	for i := range enactments {
		own[enactments[i].Name] = true
		for _, s := range enactments[i].Status.IPPool[older.Name].Held() {
			if ip, err := netip.ParseAddr(s); err == nil {
				recorded[ip] = true
			}
		}
	}
	if !reflect.DeepEqual(older.Status.Conditions, newer.Status.Conditions) || older.Status.ObservedGeneration != newer.Status.ObservedGeneration {
		out = append(out, "the conditions are the pool controller's")
	}
	removedFlight, addedFlight := diff(older.Status.InFlight, newer.Status.InFlight)
	var ownRemoved, ownAdded []ippoolv1.InFlightAddress
	for _, side := range []struct {
		entries []ippoolv1.InFlightAddress
		own     *[]ippoolv1.InFlightAddress
	}{{removedFlight, &ownRemoved}, {addedFlight, &ownAdded}} {
		for _, e := range side.entries {
			if !own[e.HolderName()] {
				out = append(out, fmt.Sprintf("the in-flight entry of %s for %s is not node %s's", holderName(e.HolderName()), e.IP, node))
				continue
			}
			*side.own = append(*side.own, e)
		}
	}
	out = append(out, takenInUse(older, newer, node, ownRemoved, ownAdded)...)
	out = append(out, foreignOrigins(older, newer, node, ownRemoved, ownAdded)...)
	out = append(out, foreignQuarantines(older, newer, node, own, recorded, ownRemoved)...)
	out = append(out, foreignKept(older, newer, node, ownRemoved, ownAdded)...)
	out = append(out, foreignBits(older, newer, node, ownRemoved, ownAdded, recorded)...)
	return out
}

// takenInUse: an in-flight entry node adds takes a free address (its bit
// clear before), or one the same write gives up for it: node's own entry
// of it, node's own quarantine of it (a return, an adoption of what the
// node carries). An entry on any other set bit would let node withdraw,
// and so clear, a bit another holder's record or entry needs.
func takenInUse(older, newer *ippoolv1.NodeIPPool, node string, removed, added []ippoolv1.InFlightAddress) []string {
	before, err := poolstatus.Allocator(older)
	if err != nil {
		return nil // foreignBits says so
	}
	var out []string
	for _, e := range added {
		ip, err := netip.ParseAddr(e.IP)
		switch {
		case err != nil, !before.HasIP(ip):
		case slices.ContainsFunc(removed, func(r ippoolv1.InFlightAddress) bool { return r.IP == e.IP }):
		case ownQuarantineLifted(older, newer, node, e.IP):
		default:
			out = append(out, fmt.Sprintf("the in-flight entry of %s takes %s, which is in use", holderName(e.HolderName()), e.IP))
		}
	}
	return out
}

// foreignOrigins: an in-flight entry node adds names, as where its address
// came from (put back there if the entry is withdrawn or revoked
// unrecorded), only the quarantine of node's of that address that the
// same write lifts (Returning), and only the kept entry of that address
// that the same write takes (Kept); or the same as an entry of node's of
// that address that the write removes (the entry rewritten). Named
// otherwise, a withdrawal or a revoke would plant that quarantine or kept
// entry, on any address, for anyone.
func foreignOrigins(older, newer *ippoolv1.NodeIPPool, node string, removed, added []ippoolv1.InFlightAddress) []string {
	var out []string
	rewritten := func(e ippoolv1.InFlightAddress) bool {
		return slices.ContainsFunc(removed, func(r ippoolv1.InFlightAddress) bool {
			return r.IP == e.IP && reflect.DeepEqual(r.Returning, e.Returning) && reflect.DeepEqual(r.Kept, e.Kept)
		})
	}
	for _, e := range added {
		if (e.Returning == nil && e.Kept == nil) || rewritten(e) {
			continue
		}
		if e.Returning != nil {
			q := poolstatus.QuarantineOf(older, e.IP)
			if q == nil || !reflect.DeepEqual(*q, *e.Returning) || q.Node != node || poolstatus.QuarantineOf(newer, e.IP) != nil {
				out = append(out, fmt.Sprintf("the in-flight entry of %s for %s names a quarantine it does not lift", holderName(e.HolderName()), e.IP))
			}
		}
		if e.Kept != nil {
			k := poolstatus.KeptOf(older, e.IP)
			if k == nil || !reflect.DeepEqual(*k, *e.Kept) || poolstatus.KeptOf(newer, e.IP) != nil {
				out = append(out, fmt.Sprintf("the in-flight entry of %s for %s names a kept address it does not take", holderName(e.HolderName()), e.IP))
			}
		}
	}
	return out
}

// ownQuarantineLifted reports whether the write removes node's quarantine
// of ip.
func ownQuarantineLifted(older, newer *ippoolv1.NodeIPPool, node, ip string) bool {
	q := poolstatus.QuarantineOf(older, ip)
	return q != nil && q.Node == node && poolstatus.QuarantineOf(newer, ip) == nil
}

// foreignQuarantines: a quarantine removed or changed must be node's; one
// added must be node's release of an address its enactments record or
// take (an entry planted on another holder's address would be lifted on
// node's evidence when that holder releases it), or the quarantine of
// node an in-flight entry of node that it withdraws (removed) came from.
func foreignQuarantines(older, newer *ippoolv1.NodeIPPool, node string, own map[string]bool, recorded map[netip.Addr]bool,
	removed []ippoolv1.InFlightAddress) []string {
	var out []string
	for _, q := range newer.Status.Quarantined {
		if poolstatus.QuarantineOf(older, q.IP) != nil {
			continue
		}
		if q.Node == node && q.HolderName() == "" && q.Capture == "" && slices.ContainsFunc(removed, func(e ippoolv1.InFlightAddress) bool {
			return e.IP == q.IP && e.Returning != nil && reflect.DeepEqual(*e.Returning, q)
		}) {
			continue // the hold of what node carries, put back where the withdrawn entry took it from
		}
		ip, err := netip.ParseAddr(q.IP)
		inFlight := poolstatus.InFlightOf(older, q.IP)
		if err != nil || q.Node != node || !own[q.HolderName()] || (!recorded[ip] && (inFlight == nil || !own[inFlight.HolderName()])) {
			out = append(out, fmt.Sprintf("the quarantine of %s for %s is not node %s's release of its own address",
				q.IP, quarantineHolder(q), node))
		}
	}
	for _, q := range older.Status.Quarantined {
		now := poolstatus.QuarantineOf(newer, q.IP)
		switch {
		case now != nil && reflect.DeepEqual(*now, q):
		case q.Node != node:
			out = append(out, fmt.Sprintf("the quarantine of %s released by %s is not node %s's to lift or change",
				q.IP, quarantineHolder(q), node))
		case now != nil && now.Node != node:
			out = append(out, fmt.Sprintf("the quarantine of %s cannot be handed to node %s", q.IP, now.Node))
		}
	}
	return out
}

// foreignKept: an address kept for a node's return is removed only by an
// in-flight entry of node that takes it (added names it), and none is
// changed, or added but by node's withdrawal of an entry that took it
// (removed names it).
func foreignKept(older, newer *ippoolv1.NodeIPPool, node string, removed, added []ippoolv1.InFlightAddress) []string {
	var out []string
	for _, k := range older.Status.KeptForReturn {
		now := poolstatus.KeptOf(newer, k.IP)
		switch {
		case now != nil && reflect.DeepEqual(*now, k):
		case now != nil:
			out = append(out, fmt.Sprintf("the address %s kept for node %s is the pool controller's to change", k.IP, k.Node))
		case !slices.ContainsFunc(added, func(e ippoolv1.InFlightAddress) bool { return e.IP == k.IP && e.Kept != nil }):
			out = append(out, fmt.Sprintf("the address %s kept for node %s is dropped without node %s taking it", k.IP, k.Node, node))
		}
	}
	for _, k := range newer.Status.KeptForReturn {
		givenBack := slices.ContainsFunc(removed, func(e ippoolv1.InFlightAddress) bool {
			return e.IP == k.IP && e.Kept != nil && reflect.DeepEqual(*e.Kept, k)
		})
		if poolstatus.KeptOf(older, k.IP) == nil && !givenBack {
			out = append(out, fmt.Sprintf("the address %s cannot be kept for node %s by node %s", k.IP, k.Node, node))
		}
	}
	return out
}

// foreignBits: a bit cleared is the address of an in-flight entry of node
// removed; a bit set, that of one added, of node's records, or of a
// quarantine added.
func foreignBits(older, newer *ippoolv1.NodeIPPool, node string, removed, added []ippoolv1.InFlightAddress, recorded map[netip.Addr]bool) []string {
	before, errOld := poolstatus.Allocator(older)
	after, errNew := poolstatus.Allocator(newer)
	switch {
	case errOld != nil && older.Status.AllocatedOffsets == newer.Status.AllocatedOffsets:
		return nil // a release's quarantine on a bitmap the pool controller rebuilds
	case errNew != nil:
		return []string{fmt.Sprintf("the new bitmap cannot be read (%v)", errNew)}
	case errOld != nil:
		return []string{fmt.Sprintf("the bitmap cannot be read (%v): the pool controller rebuilds it", errOld)}
	}
	expected := before.Clone()
	for _, e := range removed {
		if ip, err := netip.ParseAddr(e.IP); err == nil && !after.HasIP(ip) {
			_ = expected.ReleaseIP(ip)
		}
	}
	mayHold := maps.Clone(recorded)
	for _, e := range added {
		if ip, err := netip.ParseAddr(e.IP); err == nil {
			mayHold[ip] = true
		}
	}
	for _, q := range newer.Status.Quarantined {
		if ip, err := netip.ParseAddr(q.IP); err == nil && poolstatus.QuarantineOf(older, q.IP) == nil {
			mayHold[ip] = true
		}
	}
	for ip := range mayHold {
		if after.HasIP(ip) {
			_ = expected.AllocateIP(ip)
		}
	}
	if expected.Equal(after) {
		return nil
	}
	var out []string
	for _, off := range differing(expected, after, 5) {
		ip, _ := after.Range().IP(off)
		if after.Has(off) {
			out = append(out, fmt.Sprintf("the bit of %s is set, and no entry or record of node %s names it", ip, node))
		} else {
			out = append(out, fmt.Sprintf("the bit of %s is cleared, and node %s withdraws no entry of its own for it", ip, node))
		}
	}
	return out
}

// differing returns at most limit offsets, the lowest first, that a has
// and b has not, or b has and a has not.
func differing(a, b *ippool.Allocator, limit int) []uint64 {
	var bounds []uint64
	for _, al := range []*ippool.Allocator{a, b} {
		for first, last := range al.Runs() {
			bounds = append(bounds, first, last+1)
		}
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	var out []uint64
	for _, off := range bounds {
		if a.Has(off) != b.Has(off) {
			out = append(out, off)
			if len(out) == limit {
				break
			}
		}
	}
	return out
}

// diff returns the entries of older that newer has not (by every field),
// and those of newer that older has not.
func diff(older, newer []ippoolv1.InFlightAddress) (removed, added []ippoolv1.InFlightAddress) {
	in := func(list []ippoolv1.InFlightAddress, e ippoolv1.InFlightAddress) bool {
		return slices.ContainsFunc(list, func(o ippoolv1.InFlightAddress) bool { return reflect.DeepEqual(o, e) })
	}
	for _, e := range older {
		if !in(newer, e) {
			removed = append(removed, e)
		}
	}
	for _, e := range newer {
		if !in(older, e) {
			added = append(added, e)
		}
	}
	return removed, added
}

// holderName names the holder an entry names, for messages.
func holderName(name string) string { return holder.Parse(name).Title() }

// quarantineHolder names who released a quarantined address.
func quarantineHolder(q ippoolv1.QuarantinedAddress) string {
	if q.Node != "" {
		return "node " + q.Node
	}
	return holderName(q.HolderName())
}

// mirrored returns a copy of pool whose entries name their holder in both
// fields.
func mirrored(pool *ippoolv1.NodeIPPool) *ippoolv1.NodeIPPool {
	pool = pool.DeepCopy()
	pool.Status.MirrorHolders()
	return pool
}
