package claim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/carriers"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// allocate takes an address of the claim's pool for it and creates its
// IPAddress. The address is taken in one pool write that adds an in-flight
// entry naming the claim and its UID; a claim that finds such an entry
// (its IPAddress not created yet, or being restored) takes that address.
// A pool that cannot serve, or a requested address that cannot be had, is
// a Ready=False condition, not an error.
func (r *Reconciler) allocate(ctx context.Context, claim *unstructured.Unstructured) (condition, bool, error) {
	ref := capi.PoolRefOf(claim)
	var pool ippoolv1.NodeIPPool
	err := r.Client.Get(ctx, types.NamespacedName{Name: ref.Name}, &pool)
	if apierrors.IsNotFound(err) {
		return notReady(capi.ReasonPoolNotReady, fmt.Sprintf(
			"NodeIPPool %s does not exist: create it, or point spec.poolRef at an existing pool ('kubectl get nodeippools')", ref.Name)), false, nil
	}
	if err != nil {
		return condition{}, false, fmt.Errorf("get NodeIPPool %s: %w", ref.Name, err)
	}
	if c, err := r.refusal(ctx, claim, &pool); err != nil || c != nil {
		return deref(c), false, err
	}
	if why := poolstatus.Unservable(&pool); why != "" && pool.DeletionTimestamp.IsZero() {
		return notReady(capi.ReasonPoolNotReady, why), false, nil
	}
	// A pool being deleted still gives the claim the address its in-flight
	// entry holds (a restore, or a create that failed): the pool goes only
	// once that entry is recorded. take refuses anything else.
	rng, err := poolstatus.Range(&pool)
	if err != nil {
		return notReady(capi.ReasonPoolNotReady, fmt.Sprintf("NodeIPPool %s has an unusable range: %v", pool.Name, err)), false, nil
	}
	got, c, requeue, err := r.take(ctx, claim, &pool)
	if err != nil || c != nil {
		return deref(c), requeue, err
	}
	addr := newAddress(r.Version, claim, &pool, rng, got)
	if r.Signer != nil {
		r.Signer.SetProvenance(addr, claim.GetUID())
	}
	if err := r.Client.Create(ctx, addr); err != nil {
		// AlreadyExists too: created meanwhile; the next pass reads it.
		return condition{}, false, fmt.Errorf("create IPAddress %s/%s: %w", addr.GetNamespace(), addr.GetName(), err)
	}
	if err := r.forgetRestore(ctx, claim); err != nil {
		return condition{}, false, err
	}
	// Recorded, and restored if it was: the next write of the pool prunes
	// the entry.
	h, token := holderOf(claim)
	r.Pools.Recorded(pool.UID, got.String(), h.String(), token,
		fmt.Sprintf("IPAddress %s/%s records it", addr.GetNamespace(), addr.GetName()))
	if err := setAddressRef(claim, addr.GetName()); err != nil {
		return condition{}, false, err
	}
	return ready(fmt.Sprintf("%s/%d from NodeIPPool %s", got, rng.Prefix().Bits(), pool.Name)), false, nil
}

// take takes the claim's address in one pool write, which it shares with
// the claims of the pool that ask meanwhile (poolwrite.Writer.Together):
// the address its in-flight entry holds already, the one it asks for, or
// the next the pool's rules give. A refusal is a condition; requeue asks
// to look again.
// A new address is none that a node's network carries (its
// NodeNetworkState shows it) though no record holds it, as after a
// restore: the machine of the claim would share it with the node. What
// the nodes carry is read before the write where it may be needed
// (carriedFor).
func (r *Reconciler) take(ctx context.Context, claim *unstructured.Unstructured, pool *ippoolv1.NodeIPPool) (netip.Addr, *condition, bool, error) {
	ask := askOf(claim)
	holder := ask.Asker.Holder
	requested := claim.GetAnnotations()[capi.RequestedAddressAnnotation]
	restoring := claim.GetAnnotations()[capi.RestoreAnnotation]
	nodesCarry := r.carriedFor(ctx, pool, restoring != "")
	var got netip.Addr
	var refusal *condition
	ctx = audit.WithReason(ctx, "Served", "IPAddressClaim "+claim.GetNamespace()+"/"+claim.GetName()+" asks for an address")
	err := r.Pools.Together(ctx, pool, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		var want func() (netip.Addr, error)
		switch {
		case restoring != "":
			// The address is the claim's own, which its machine carries:
			// what nodes carry is not read.
			// Who else records the address is read after the pool, so a
			// holder that pruned its entry since wrote its record first,
			// and a prune after the read fails this write.
			want = func() (netip.Addr, error) {
				ip, c, err := takeBack(p, alloc, restoring, func() (string, error) {
					return r.otherHolder(ctx, p, holder, restoring)
				})
				return ip, refusedOr(c, err)
			}
		case requested != "":
			want = func() (netip.Addr, error) {
				avoid, err := nodesCarry.in(ctx, alloc.Range())
				if err != nil {
					return netip.Addr{}, err
				}
				ip, c := takeRequested(p, alloc, requested, avoid)
				return ip, refusedOr(c, nil)
			}
		}
		var avoid map[netip.Addr][]string
		var err error
		if want == nil && alloc.Free() > 0 && len(assign.Resumable(p, ask)) == 0 {
			if avoid, err = nodesCarry.in(ctx, alloc.Range()); err != nil {
				return false, err
			}
		}
		var changed bool
		got, changed, err = serveAsk(p, alloc, ask, now(r.Clock), want, avoid)
		refusal, err = conditionOf(p, alloc, err)
		return changed && refusal == nil, err
	})
	switch {
	case poolwrite.Gone(err):
		c := notReady(capi.ReasonPoolNotReady, fmt.Sprintf("NodeIPPool %s was deleted or re-created meanwhile; trying again", pool.Name))
		return netip.Addr{}, &c, true, nil
	case err != nil:
		return netip.Addr{}, nil, false, fmt.Errorf("allocate from NodeIPPool %s for IPAddressClaim %s/%s: %w",
			pool.Name, claim.GetNamespace(), claim.GetName(), err)
	case refusal != nil:
		return netip.Addr{}, refusal, false, nil
	case !got.IsValid():
		return netip.Addr{}, nil, false, fmt.Errorf("NodeIPPool %s: the in-flight entry of %s holds no address", pool.Name, holder.Title())
	}
	return got, nil, false, nil
}

// carriedFor returns what nodes carry, for a new address of pool: read
// already, where the pool (as cached) has a free address and the claim is
// not restoring its own, before the pool write, which may be shared and
// is retried as a whole: what the claims of one write read inside it
// holds the pool's read and write apart. The write reads only what is not
// read yet (a failed read here, a range changed meanwhile), and only for a
// new address, whose read's error is then the claim's.
func (r *Reconciler) carriedFor(ctx context.Context, pool *ippoolv1.NodeIPPool, restoring bool) *carried {
	source := r.Carried
	if source == nil {
		source = carriers.FromAPI(r.APIReader)
	}
	c := &carried{source: source, api: r.APIReader}
	if rng, err := poolstatus.Range(pool); err == nil && !restoring && pool.Status.Free > 0 {
		_, _ = c.in(ctx, rng) // read again in the write if it failed
	}
	return c
}

// carried reads which addresses the networks of existing Nodes carry, and
// of Nodes deleted within the departure hold (Carriers.Of, then
// Carriers.Within), once for each
// range it is asked about: a retried pool write asks about the range of
// the pool it read, which an admin may have changed in place.
type carried struct {
	source  *carriers.Carriers
	api     client.Reader
	all     map[netip.Addr][]string
	byRange map[string]map[netip.Addr][]string
}

// in returns, by address of rng, the existing Nodes that carry it.
func (c *carried) in(ctx context.Context, rng *ippool.Range) (map[netip.Addr][]string, error) {
	if c.all == nil {
		all, err := c.source.Of(ctx)
		if err != nil {
			return nil, err
		}
		c.all, c.byRange = all, map[string]map[netip.Addr][]string{}
	}
	if found, ok := c.byRange[rng.String()]; ok {
		return found, nil
	}
	found, err := c.source.Within(ctx, c.api, assign.Carrying{Carriers: maps.Clone(c.all)}, rng)
	if err != nil {
		return nil, fmt.Errorf("read what nodes' networks carry, to hand out none of it: %w", err)
	}
	c.byRange[rng.String()] = found.Carriers
	return found.Carriers, nil
}

func deref(c *condition) condition {
	if c == nil {
		return condition{}
	}
	return *c
}

// serveAsk serves the claim's ask in one pool write by the rule of every
// holder: the address its in-flight entry holds already, else, with want
// nil, the one the pool's rules give an asker that is no node
// (assign.Chooser.Serve), passing by those carriers shows on nodes'
// networks, or the address want names and takes (assign.ServeOne). It
// reports whether the pool changed.
func serveAsk(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, a assign.Ask, since metav1.Time,
	want func() (netip.Addr, error), carriers map[netip.Addr][]string) (netip.Addr, bool, error) {
	var s assign.Served
	var err error
	if want == nil {
		ch := assign.New(p, alloc)
		ch.Avoid(carriers)
		s, err = ch.Serve(a, since)
		ch.Done()
	} else {
		s, err = assign.ServeOne(p, a, since, want)
	}
	switch {
	case len(s.Resumed) > 0:
		return s.Resumed[0], false, nil
	case err != nil:
		return netip.Addr{}, false, err
	}
	return s.Taken[0].IP, true, nil
}

// refused is a claim's refusal (a condition) carried as an error through
// assign.ServeOne.
type refused struct{ c condition }

func (r *refused) Error() string { return r.c.message }

// refusedOr returns c as an error, or err when there is no refusal.
func refusedOr(c *condition, err error) error {
	if c != nil {
		return &refused{c: *c}
	}
	return err
}

// conditionOf turns the error of serving a claim into the condition that
// says why it got no address; an error that refuses nothing is returned.
func conditionOf(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, err error) (*condition, error) {
	var unservable *assign.Unservable
	var refusal *refused
	var c condition
	switch {
	case err == nil:
		return nil, nil
	case errors.As(err, &unservable):
		// The cache said it could serve; the API server says otherwise
		// (a rebuild began meanwhile).
		c = notReady(capi.ReasonPoolNotReady, unservable.Why)
	case errors.As(err, &refusal):
		c = refusal.c
	case errors.Is(err, ippool.ErrFull):
		why, carried := "", false
		if full := (*assign.FullError)(nil); errors.As(err, &full) && full.More() != "" {
			why, carried = "; "+full.More(), full.Carried > 0
		}
		c = notReady(capi.ReasonPoolExhausted, fmt.Sprintf(
			"NodeIPPool %s has no address left for this claim (%d of %d allocated%s); the claim is served as soon as one is freed, "+
				"or grow the pool's range", p.Name, alloc.Count(), alloc.Range().Size(), why))
		c.carried = carried
	default:
		// It refuses nothing (takeBack could not read who else records
		// the address): the pass fails, and is tried again.
		return nil, err
	}
	return &c, nil
}

// takeRequested takes the address a claim asks for by annotation, if the
// pool hands it out, nobody holds, reserves or keeps it, and no node's
// network carries it (carriers).
func takeRequested(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, s string, carriers map[netip.Addr][]string) (netip.Addr, *condition) {
	refuse := func(format string, args ...any) (netip.Addr, *condition) {
		c := notReady(capi.ReasonAllocationFailed, fmt.Sprintf("annotation %s=%s: ", capi.RequestedAddressAnnotation, s)+
			fmt.Sprintf(format, args...))
		return netip.Addr{}, &c
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return refuse("not an IP address; write one address of NodeIPPool %s, or remove the annotation", p.Name)
	}
	if _, err := alloc.Range().Assignable(ip); err != nil {
		return refuse("NodeIPPool %s does not hand it out (%v); ask for one of its range, or remove the annotation", p.Name, err)
	}
	reservations, _ := assign.Reservations(p, alloc.Range())
	for _, res := range reservations {
		if res.IP == ip {
			return refuse("reserved in NodeIPPool %s for %s", p.Name, res.Describe())
		}
	}
	if held := heldByEntry(p, s); held != "" {
		return refuse("%s", held)
	}
	if alloc.HasIP(ip) {
		return refuse("in use ('kubectl nodeippool show %s' names its holder)", p.Name)
	}
	if nodes := carriers[ip]; len(nodes) > 0 {
		return refuse("on the network of node %s (its NodeNetworkState shows it), though no holder records it; ask for another "+
			"address, or take it off that node ('kubectl nodeippool check' says more)", strings.Join(nodes, ", "))
	}
	if err := alloc.AllocateIP(ip); err != nil {
		return refuse("%v", err)
	}
	return ip, nil
}

// takeBack takes again the address of a claim's IPAddress being restored
// (capi.RestoreAnnotation), whose in-flight entry is gone. An entry of
// anyone else refuses it. Its bit may be set still (the claim's own, not
// collected yet) or again (garbage collection freed it, and another
// holder took it since): then other, which reads the records from the
// API server, must name no other holder of it.
func takeBack(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, s string, other func() (string, error)) (netip.Addr, *condition, error) {
	refuse := func(why string) (netip.Addr, *condition, error) {
		c := notReady(capi.ReasonAllocationFailed, fmt.Sprintf("the address %s of its deleted IPAddress %s; remove the annotation %s "+
			"to take another one", s, why, capi.RestoreAnnotation))
		return netip.Addr{}, &c, nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return refuse("is not an address")
	}
	if held := heldByEntry(p, s); held != "" {
		return refuse("is " + held)
	}
	err = alloc.AllocateIP(ip)
	switch {
	case errors.Is(err, ippool.ErrAllocated):
		who, readErr := other()
		if readErr != nil {
			return netip.Addr{}, nil, readErr
		}
		if who != "" {
			return refuse(fmt.Sprintf("is held by %s in NodeIPPool %s", who, p.Name))
		}
	case err != nil:
		return refuse(fmt.Sprintf("cannot be had from NodeIPPool %s (%v)", p.Name, err))
	}
	return ip, nil, nil
}

// forgetRestore removes capi.RestoreAnnotation from a claim whose
// IPAddress is back.
func (r *Reconciler) forgetRestore(ctx context.Context, claim *unstructured.Unstructured) error {
	annotations := claim.GetAnnotations()
	if _, ok := annotations[capi.RestoreAnnotation]; !ok {
		return nil
	}
	patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
	delete(annotations, capi.RestoreAnnotation)
	claim.SetAnnotations(annotations)
	if err := r.Client.Patch(ctx, claim, patch); err != nil {
		return fmt.Errorf("remove %s from IPAddressClaim %s/%s: %w", capi.RestoreAnnotation, claim.GetNamespace(), claim.GetName(), err)
	}
	return nil
}

// heldByEntry says which entry of the pool holds s (in flight,
// quarantined, kept for a node's return), or "".
func heldByEntry(p *ippoolv1.NodeIPPool, s string) string {
	if q := poolstatus.QuarantineOf(p, s); q != nil {
		return fmt.Sprintf("quarantined in NodeIPPool %s since its release by %s: it is free once nothing carries it",
			p.Name, holderName(q.HolderName(), q.Node))
	}
	if e := poolstatus.InFlightOf(p, s); e != nil {
		return "being allocated to " + holderName(e.HolderName(), "")
	}
	if k := poolstatus.KeptOf(p, s); k != nil {
		return fmt.Sprintf("kept in NodeIPPool %s for the return of node %s", p.Name, k.Node)
	}
	return ""
}

// holderName names the holder an entry names, for messages.
func holderName(name, node string) string {
	if h := holder.Parse(name); h.Foreign() || node == "" {
		return h.Title()
	}
	return "node " + node
}

// newAddress builds the IPAddress of a claim holding ip of pool: named and
// namespaced as the claim, owned by it, protected by capi.ProtectFinalizer,
// with the pool's prefix length and gateway.
func newAddress(version string, claim *unstructured.Unstructured, pool *ippoolv1.NodeIPPool, rng *ippool.Range, ip netip.Addr) *unstructured.Unstructured {
	addr := capi.NewAddress(version)
	addr.SetNamespace(claim.GetNamespace())
	addr.SetName(claim.GetName())
	if cluster := capi.ClusterOf(claim); cluster != "" {
		addr.SetLabels(map[string]string{capi.ClusterNameLabel: cluster})
	}
	addr.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: claim.GetAPIVersion(), Kind: claim.GetKind(),
		Name: claim.GetName(), UID: claim.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}})
	addr.SetFinalizers([]string{capi.ProtectFinalizer})
	spec := map[string]any{
		"address":  ip.String(),
		"prefix":   int64(rng.Prefix().Bits()),
		"claimRef": map[string]any{"name": claim.GetName()},
		"poolRef":  map[string]any{"apiGroup": ippoolv1.GroupVersion.Group, "kind": "NodeIPPool", "name": pool.Name},
	}
	if gw := rng.Gateway(); gw.IsValid() {
		spec["gateway"] = gw.String()
	}
	addr.Object["spec"] = spec
	return addr
}

// setAddressRef points the claim's status.addressRef at its IPAddress.
func setAddressRef(claim *unstructured.Unstructured, name string) error {
	if err := unstructured.SetNestedField(claim.Object, name, "status", "addressRef", "name"); err != nil {
		return fmt.Errorf("set status.addressRef of IPAddressClaim %s/%s: %w", claim.GetNamespace(), claim.GetName(), err)
	}
	return nil
}

// carrierOf returns the node whose NodeNetworkState shows ip on an
// interface, or "".
func carrierOf(ctx context.Context, reader client.Reader, ip netip.Addr) (string, error) {
	var list nncev1beta1.NodeNetworkStateList
	if err := reader.List(ctx, &list); err != nil {
		return "", fmt.Errorf("list NodeNetworkStates: %w", err)
	}
	for _, nns := range list.Items {
		if _, ok := netstate.Carriers(nns.Status.CurrentState.Raw)[ip]; ok {
			return nns.Name, nil
		}
	}
	return "", nil
}

// now is the clock's time, to the second, as entries record it.
func now(clk clock.Clock) metav1.Time {
	return metav1.NewTime(clk.Now().Truncate(1e9))
}

// equalStatus reports whether two versions of a claim have the same status.
func equalStatus(a, b *unstructured.Unstructured) bool {
	sa, _, _ := unstructured.NestedFieldNoCopy(a.Object, "status")
	sb, _, _ := unstructured.NestedFieldNoCopy(b.Object, "status")
	return reflect.DeepEqual(sa, sb)
}
