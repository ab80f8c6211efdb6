package pool

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/enactmentrecord"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/nodemeta"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// parallelRecords bounds the records a serve has in flight. A thousand
// nodes waiting on a batch wait on these writes, while the API server also
// serves their handlers: a handful in flight would give the batch a
// handful of the server's turns.
const parallelRecords = 32

// request is an enactment that asked the controller to allocate for it (a
// new enactment's request annotation, or Pending / IPPoolBusy), with the
// captures of the pool it has no address for, and, once served, their
// addresses.
type request struct {
	enactment *nncev1beta1.NodeNetworkConfigurationEnactment
	refs      []capture.Ref
	addresses []capture.Address
	// ifaces are, by capture, the interfaces the policy's template puts
	// its address on (capture.Interfaces).
	ifaces map[string][]string
	// notes describe the addresses that came back, were kept for another
	// node's return, or were adopted.
	notes assign.Notes
}

// busyRequests returns the requests waiting on pool, oldest first. An
// enactment's captures come from its policy in the cache; one whose
// policy is gone or changed since it asked, or that already records an
// address the range hands out for every capture of the pool, asks
// nothing. A recorded address the range no longer hands out is replaced:
// the record then leaves it releasing (enactmentrecord.Add).
func (r server) busyRequests(ctx context.Context, pool *ippoolv1.NodeIPPool, enactments []nncev1beta1.NodeNetworkConfigurationEnactment) []*request {
	rng, err := poolstatus.Range(pool)
	if err != nil {
		return nil
	}
	var out []*request
	policies := map[string]*policyCaptures{} // a thousand requests, one policy
	for i := range enactments {
		e := &enactments[i]
		if !asks(e, pool.Name) {
			continue
		}
		name := e.Labels[shared.EnactmentPolicyLabel]
		p, ok := policies[name]
		if !ok {
			p = r.policyCaptures(ctx, name)
			policies[name] = p
		}
		if p == nil || (!enactmentrecord.Requesting(e) && p.generation != e.Status.PolicyGeneration) || p.unrenderable(pool, rng) {
			continue
		}
		rq := &request{enactment: e, ifaces: p.ifaces}
		for _, ref := range p.captures.RefsOf(pool.Name) {
			if addr, ok := enactmentrecord.Of(e, ref); !ok || poolstatus.Outside(pool.Name, rng, ref.Capture, addr.IP) != "" {
				rq.refs = append(rq.refs, ref)
			}
		}
		if len(rq.refs) > 0 {
			out = append(out, rq)
		}
	}
	slices.SortFunc(out, func(a, b *request) int {
		return cmp.Or(pendingSince(a.enactment).Compare(pendingSince(b.enactment).Time), cmp.Compare(a.enactment.Name, b.enactment.Name))
	})
	return out
}

// asks reports whether the enactment asks the controller for addresses
// from pool: a new enactment's request, or Pending / IPPoolBusy.
func asks(e *nncev1beta1.NodeNetworkConfigurationEnactment, pool string) bool {
	if !e.DeletionTimestamp.IsZero() {
		return false
	}
	return enactmentrecord.Requested(e, pool) || (e.Status.WaitingForIPPool == pool && pendingFor(e, ippoolv1.ReasonIPPoolBusy))
}

// policyCaptures are a policy's generation and parsed captures, with the
// optional fields its template reads from them (capture.Needs).
type policyCaptures struct {
	generation int64
	captures   capture.Captures
	needs      map[string][]string
	ifaces     map[string][]string
}

// unrenderable reports whether the template reads a field that the
// policy's captures of pool do not give (a gateway the pool does not set):
// the policy takes no address until it is fixed, and its handler says why.
func (p *policyCaptures) unrenderable(pool *ippoolv1.NodeIPPool, rng *ippool.Range) bool {
	needs := map[string][]string{}
	for _, ref := range p.captures.RefsOf(pool.Name) {
		if f := p.needs[ref.Capture]; len(f) > 0 {
			needs[ref.Capture] = f
		}
	}
	return len(needs) > 0 && capture.Missing(needs, pool.Name, poolstatus.Address(pool, rng, rng.Start())) != nil
}

// policyCaptures reads a policy from the cache and parses its captures;
// nil if it is gone or its captures do not parse.
func (r server) policyCaptures(ctx context.Context, name string) *policyCaptures {
	var p nmstatev1.NodeNetworkConfigurationPolicy
	if r.Client.Get(ctx, types.NamespacedName{Name: name}, &p) != nil {
		return nil
	}
	captures, err := capture.ParsePolicy(p.Spec.Capture, p.Spec.DesiredState.Raw)
	if err != nil {
		return nil
	}
	pc := &policyCaptures{generation: p.Generation, captures: captures, needs: capture.Needs(p.Spec.DesiredState.Raw, captures.Refs),
		ifaces: map[string][]string{}}
	for _, ref := range captures.Refs {
		pc.ifaces[ref.Capture] = capture.Interfaces(p.Spec.DesiredState.Raw, ref.Capture)
	}
	return pc
}

// pendingSince returns since when the enactment asks: its creation for a
// new enactment's request.
func pendingSince(e *nncev1beta1.NodeNetworkConfigurationEnactment) metav1.Time {
	if enactmentrecord.Requesting(e) {
		return e.CreationTimestamp
	}
	if c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionPending); c != nil {
		return c.LastTransitionTime
	}
	return metav1.Time{}
}

// takeFor serves the request's captures with c (assign.Chooser.Serve),
// all or none, adding their in-flight entries to pool under the
// enactment's resourceVersion, the token its record is written under. An
// enactment with an entry in flight already, under any token
// (assign.Resumable), was served by an earlier pass or another writer
// whose record the cache has not shown yet (or which failed): it is not
// served again, and the entries are pruned once recorded, or revoked.
// It returns the chooser's error when the pool has no address left for
// the request.
func takeFor(pool *ippoolv1.NodeIPPool, c *assign.Chooser, rq *request, asker assign.Asker, since metav1.Time) (bool, error) {
	captures := make([]string, len(rq.refs))
	for i, ref := range rq.refs {
		captures[i] = ref.Capture
	}
	s, err := c.Serve(assign.Ask{Asker: asker, Captures: captures, Token: rq.enactment.ResourceVersion}, since)
	if errors.Is(err, ippool.ErrFull) {
		return false, err
	}
	if err != nil || len(s.Resumed) > 0 {
		return false, nil
	}
	taken := s.Taken
	rng := c.Range()
	rq.addresses, rq.notes = rq.addresses[:0], assign.Notes{}
	for i, t := range taken {
		rq.notes.Add(t, captures[i])
		rq.addresses = append(rq.addresses, poolstatus.Address(pool, rng, t.IP))
	}
	return true, nil
}

// asker describes a request's enactment to the chooser, with its
// node's labels from labels.
func asker(e *nncev1beta1.NodeNetworkConfigurationEnactment, labels map[string]map[string]string) assign.Asker {
	node := e.Labels[shared.EnactmentNodeLabel]
	return assign.Asker{Holder: holder.ForEnactment(e.Name), Node: node, Policy: e.Labels[shared.EnactmentPolicyLabel],
		Labels: func() map[string]string { return labels[node] }}
}

// requestersLabels reads, from the cache, the labels of the requests'
// nodes when the pool reserves addresses by label selector: the chooser
// needs them, and the pool write's mutation reads nothing.
func (r server) requestersLabels(ctx context.Context, pool *ippoolv1.NodeIPPool, requests []*request) map[string]map[string]string {
	if !slices.ContainsFunc(pool.Spec.Reservations, func(res ippoolv1.Reservation) bool { return res.NodeSelector != nil }) {
		return nil
	}
	out := map[string]map[string]string{}
	for _, rq := range requests {
		node := rq.enactment.Labels[shared.EnactmentNodeLabel]
		if _, ok := out[node]; ok {
			continue
		}
		if n, err := nodemeta.Get(ctx, r.Client, node); err == nil {
			out[node] = n.Labels
		} else {
			out[node] = nil
		}
	}
	return out
}

// serve allocates for every enactment that asks the controller to (a new
// enactment's request, or Pending / IPPoolBusy): all of them in one pool
// write, with in-flight entries, then one record per enactment,
// written under the token as a handler would. A record refused because the
// enactment changed withdraws its addresses. A pool that cannot serve them
// all serves the oldest (and those with a reservation or a return); the
// others wait and try again. A node that carries an address the pool has
// set and nobody records gets it back (unrecorded); serve returns how soon
// to look again when such a node had to wait for that to be confirmed.
func (r server) serve(ctx context.Context, pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, v view) (time.Duration, error) {
	requests := r.busyRequests(ctx, pool, v.holdings.enactments)
	if len(requests) == 0 {
		r.remember(pool).serving.waitsOnCarried.Store(false)
		return 0, nil
	}
	var served []*request
	labels := r.requestersLabels(ctx, pool, requests)
	carried, err := r.carriedFor(ctx, pool, requests, v.holdings.records)
	if err != nil {
		return 0, err
	}
	back, unconfirmed := r.unrecorded(ctx, pool, alloc, v, carried)
	var givenBack []string
	var wait map[string]bool
	var full map[*request]error
	notes := audit.Notes{}
	ctx = audit.WithNotes(audit.WithReason(ctx, "Served", "its enactment asked the pool controller for it"), notes)
	_, err = r.Pools.Update(ctx, pool.Name, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		served, givenBack, wait, full = served[:0], nil, nil, map[*request]error{}
		if poolstatus.Unservable(p) != "" {
			return false, nil
		}
		since := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
		givenBack, wait = back.giveBack(p, alloc, carried, since)
		chooser := assign.New(p, alloc)
		defer chooser.Done()
		chooser.Avoid(carried.Carriers)
		for _, rq := range requests {
			if wait[rq.enactment.Labels[shared.EnactmentNodeLabel]] {
				continue // what it carries is confirmed again in the next pass
			}
			if took, err := takeFor(p, chooser, rq, adoption(carried, asker(rq.enactment, labels), rq), since); took {
				served = append(served, rq)
			} else if err != nil {
				full[rq] = err
			} // else served already, or a later request may have a reservation or a return
		}
		if len(served) == 0 {
			return len(givenBack) > 0, nil // held for their nodes all the same
		}
		noteAdopted(notes, served)
		r.Metrics.servedWrite(pool.Name)
		return true, nil
	}, poolwrite.Incarnation(pool.UID))
	if err != nil {
		return 0, err
	}
	r.reportGivenBack(pool, givenBack)
	waitsOnCarried := r.reportFull(pool, full)
	r.remember(pool).serving.waitsOnCarried.Store(waitsOnCarried)
	if len(served) > 0 {
		ctrl.LoggerFrom(ctx).Info("allocated for waiting enactments in one pool write", "enactments", len(served), "waiting", len(requests))
	}
	var again time.Duration
	if len(wait) > 0 {
		again = confirmAgain // the nodes that wait are served once what they carry is confirmed
	}
	if waitsOnCarried {
		again = soonest(again, carriedAgain)
	}
	if err := r.recordAll(ctx, pool, served); err != nil {
		return again, err
	}
	return again, unconfirmed // an error backs off; the nodes it names waited
}

// recordAll writes the records of the served requests, several at a time:
// they are independent writes to different enactments.
func (r server) recordAll(ctx context.Context, pool *ippoolv1.NodeIPPool, served []*request) error {
	meta := shared.NodeNetworkConfigurationEnactmentMetaInfo{Version: "0", TimeStamp: metav1.NewTime(r.Clock.Now().Truncate(time.Second))}
	var g errgroup.Group
	g.SetLimit(parallelRecords)
	for _, rq := range served {
		g.Go(func() error { return r.recordServed(ctx, pool, rq, meta) })
	}
	return g.Wait()
}

// confirmAgain is how soon a pass looks again when nodes wait for the
// addresses they carry to be confirmed unrecorded (givingBack): the pool
// was written meanwhile, and the holders are listed again. Garbage
// collection holds such an address for its node after its grace period
// in any case.
const confirmAgain = time.Second

// carriedAgain is how soon a pass looks again when a node waits for an
// address that only other nodes' networks carry, whatever their states
// say meanwhile: a Node deleted while its machine runs changes no state
// (its handler publishes none), and the state it leaves behind counts
// for nothing once the Node is gone.
const carriedAgain = 10 * time.Second

// reportFull tells, on the pool, of each enactment that found no address
// only because the free ones are on other nodes' networks: its handler,
// which does not see those, took the pool for not full and asked. An
// ordinary full pool is the handler's to report. It reports whether any
// enactment waits so.
func (r server) reportFull(pool *ippoolv1.NodeIPPool, full map[*request]error) bool {
	waits := false
	for rq, err := range full {
		var why *assign.FullError
		if !errors.As(err, &why) || why.Carried == 0 {
			continue
		}
		waits = true
		r.Recorder.Eventf(pool, rq.enactment, corev1.EventTypeWarning, ippoolv1.ReasonExhaustedIPPool, "Serve",
			"NodeIPPool %s has no address left for node %s (policy %s): %s; it waits. Free addresses, or take those "+
				"addresses off the nodes that carry them ('kubectl nodeippool check %s' lists them), or grow the range",
			pool.Name, rq.enactment.Labels[shared.EnactmentNodeLabel], rq.enactment.Labels[shared.EnactmentPolicyLabel],
			why.More(), pool.Name)
		// On the enactment too, where its admin looks first: its Pending
		// condition is its handler's, and names no reason.
		r.Recorder.Eventf(rq.enactment, pool, corev1.EventTypeWarning, ippoolv1.ReasonExhaustedIPPool, "Serve",
			"NodeIPPool %s has no address left for this node: %s; it is served once one is free. Take those addresses off the "+
				"nodes that carry them ('kubectl nodeippool check %s' lists them), free addresses, or grow the range",
			pool.Name, why.More(), pool.Name)
	}
	return waits
}

// reportGivenBack raises the Event of the unrecorded addresses a serving
// write held for the nodes that carry them.
func (r server) reportGivenBack(pool *ippoolv1.NodeIPPool, givenBack []string) {
	if len(givenBack) == 0 {
		return
	}
	r.Recorder.Eventf(pool, audit.ListReference(pool.Name, givenBack), corev1.EventTypeWarning, ippoolv1.ReasonAddressQuarantined, "Serve",
		"Held %s for the nodes that carry them (adopted by a capture that configures its interface): set in the pool's "+
			"status but recorded by no holder (a record was lost, or an entry restored from a backup named a holder that is gone)",
		listNames(givenBack, 10))
}

// recordServed writes the addresses of a served request into its
// enactment's record, and nothing else of it: the handler asks to apply
// once its record is complete, in a write of its own (docs/protocol.md
// "Who writes what": the handler's fields have the handler for their one
// writer). The write is guarded by the token the addresses' in-flight entries carry, as a
// handler's record is: a conflict means the enactment changed since (a
// fence among the possible changes), so the record certainly does not
// exist; the addresses are withdrawn, and the enactment, if it still asks,
// is served again with a new token.
func (r server) recordServed(ctx context.Context, pool *ippoolv1.NodeIPPool, rq *request, meta shared.NodeNetworkConfigurationEnactmentMetaInfo) error {
	ips := make([]string, len(rq.addresses))
	for i, a := range rq.addresses {
		ips[i] = a.IP.String()
	}
	e := rq.enactment.DeepCopy()
	for i, ref := range rq.refs {
		enactmentrecord.Add(e, ref, rq.addresses[i], meta)
	}
	enactmentrecord.NoteNotAdopted(e, pool.Name, rq.notes.NotAdopted)
	err := r.Client.Status().Update(ctx, e)
	if err == nil {
		for _, ip := range ips {
			r.Pools.Recorded(pool.UID, ip, holder.ForEnactment(e.Name).String(), rq.enactment.ResourceVersion,
				"enactment "+e.Name+" records it")
		}
		ctrl.LoggerFrom(ctx).Info("allocated address", "enactment", e.Name, "node", e.Labels[shared.EnactmentNodeLabel],
			"policy", e.Labels[shared.EnactmentPolicyLabel], "ips", ips, "returned", rq.notes.Returned, "reclaimed", rq.notes.Reclaimed)
		for _, n := range rq.notes.Events(pool.Name) {
			r.Recorder.Eventf(e, pool, n.Type(), n.Reason, "Allocate", "%s", n.Message)
		}
		return nil
	}
	if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return err // it may have landed: the entries stay for the next look
	}
	if _, err := r.Pools.Withdraw(ctx, pool.Name, rq.enactment.Name, rq.enactment.ResourceVersion, ips, poolwrite.Incarnation(pool.UID)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "could not withdraw unrecorded addresses; they are revoked after the grace period",
			"enactment", rq.enactment.Name, "ips", ips)
	}
	return nil
}

// noteAdopted says, for the audit trail, which served addresses were
// adopted: the node carried them already.
func noteAdopted(notes audit.Notes, served []*request) {
	for _, rq := range served {
		for _, a := range rq.notes.Adopted { // "10.0.0.4 on eth1"
			ip, _, _ := strings.Cut(a, " ")
			notes.Set(ip, "Adopted", "node of enactment "+rq.enactment.Name+" carries "+a)
		}
	}
}
