package companion

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/yaml"

	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/policymeta"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/policystatus"
)

// The generated policies are watched and listed as metadata only
// (policymeta): kubernetes-nmstate's handler on every node writes every
// policy's status each time it reconciles it, N writes of each of N
// policies, and a watch of the whole objects would decode each of them,
// desired state and all. What a pass needs beyond their metadata is read
// from the API server, and only then: the spec of a policy whose spec this
// process does not know at its generation (specs), and the status of one
// whose node has no enactment of it (handled).

// knownSpec is the spec of one generated policy at one generation of one
// incarnation, as this process wrote or last read it.
type knownSpec struct {
	uid        types.UID
	generation int64
	spec       shared.NodeNetworkConfigurationPolicySpec
}

// handledRead is what the status of a generated policy said when last
// read (at), since when it has been read at that generation, and whether
// its node was then waiting for its enactment of it.
type handledRead struct {
	uid        types.UID
	generation int64
	since, at  time.Time
	waiting    bool
	unhandled  bool
}

// handledTTL is how long a read of whether kubernetes-nmstate's handler
// runs on a node stands at first: a node without an enactment of its
// policy's generation is read at most this often, and one whose enactment
// of it progresses (its handler may have gone mid-apply) every
// progressPoll. A wait for the enactment that lasts is read every quarter
// of its length so far, at most every handledTTLMax: in a rollout of hundreds of nodes
// kubernetes-nmstate's handlers take many minutes to reach each policy
// (each reconciles every policy), and reads every few seconds of every
// waiting node's policy, whole, were most of this controller's work.
const handledTTL, handledTTLMax = 5 * time.Second, time.Minute

// stands reports whether h still says, at now, what the status of g
// (its metadata) is: for floor, or, while the node waits for its
// enactment (waiting), for a quarter of the wait so far, at most
// handledTTLMax. A node whose enactment progresses is read every floor,
// and at once if the read was made while it waited: a read from before
// its handler started, which may say it runs none, must not leave it
// uncounted (and holding no slot of maxUnavailable) while it applies.
func (h handledRead) stands(g *metav1.PartialObjectMetadata, floor time.Duration, waiting bool, now time.Time) bool {
	if h.uid != g.UID || h.generation != g.Generation || h.waiting && !waiting {
		return false
	}
	ttl := floor
	if waiting {
		ttl = min(max(now.Sub(h.since)/4, floor), max(handledTTLMax, floor))
	}
	return now.Sub(h.at) < ttl
}

// policyReads are the spec and status reads of generated policies, by
// name.
type policyReads struct {
	specs   sync.Map // name → knownSpec
	handled sync.Map // name → handledRead
}

// remember notes the spec of g, whole as written or read.
func (pr *policyReads) remember(g *nmstatev1.NodeNetworkConfigurationPolicy) {
	pr.specs.Store(g.Name, knownSpec{uid: g.UID, generation: g.Generation, spec: *g.Spec.DeepCopy()})
}

// forget drops what is known of the policy name.
func (pr *policyReads) forget(name string) {
	pr.specs.Delete(name)
	pr.handled.Delete(name)
}

// forgetIncarnation drops what is known of the policy name if it is of
// the incarnation uid (one of the name created since is kept).
func (pr *policyReads) forgetIncarnation(name string, uid types.UID) {
	if v, ok := pr.specs.Load(name); ok && v.(knownSpec).uid == uid {
		// A spec is not comparable (CompareAndDelete): one of a later
		// incarnation noted meanwhile is at worst read again.
		pr.specs.Delete(name)
	}
	if v, ok := pr.handled.Load(name); ok && v.(handledRead).uid == uid {
		pr.handled.CompareAndDelete(name, v)
	}
}

// forgetDeleted is a predicate of the generated policies' watch that lets
// go of what this process wrote or read of a policy once it is deleted,
// by anyone: kept, a policy deleted by someone else would stay in memory
// for good, and one deleted before the cache showed this process's write
// of it would be waited on for good (stale). Only what is of the deleted
// incarnation goes: the late event of an earlier one must not drop this
// process's write of the name created again (the node would count as
// idle before the cache shows it, one more than maxUnavailable allows).
func (r *Reconciler) forgetDeleted() predicate.Funcs {
	return predicate.Funcs{DeleteFunc: func(e event.DeleteEvent) bool {
		r.forgetWritten(e.Object.GetName(), e.Object.GetUID())
		r.reads.forgetIncarnation(e.Object.GetName(), e.Object.GetUID())
		return true
	}}
}

// specOf returns the spec of the generated policy g (its metadata) at g's
// generation: known, or read from the API server. A read that finds
// another generation is an error, and the pass looks again once the
// cache has caught up: the spec of one generation must never be taken
// with the enactment state of another (a release confirmed by the
// enactment of the policy that still carried the addresses, against the
// spec of the one that takes them off, would let go of addresses still
// on the node).
func (r *Reconciler) specOf(ctx context.Context, g *metav1.PartialObjectMetadata) (*shared.NodeNetworkConfigurationPolicySpec, error) {
	if v, ok := r.reads.specs.Load(g.Name); ok {
		if k := v.(knownSpec); k.uid == g.UID && k.generation == g.Generation {
			return &k.spec, nil
		}
	}
	full, err := r.readPolicy(ctx, g)
	if err != nil {
		return nil, err
	}
	if full.Generation != g.Generation {
		return nil, fmt.Errorf("policy %s is at generation %d, the cache shows %d: looking again once the cache has caught up",
			g.Name, full.Generation, g.Generation)
	}
	return &full.Spec, nil
}

// readPolicy reads the whole generated policy g from the API server, and
// notes its spec. One of another incarnation is NotFound.
func (r *Reconciler) readPolicy(ctx context.Context, g *metav1.PartialObjectMetadata) (*nmstatev1.NodeNetworkConfigurationPolicy, error) {
	var full nmstatev1.NodeNetworkConfigurationPolicy
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: g.Name}, &full); err != nil {
		return nil, fmt.Errorf("get policy %s: %w", g.Name, err)
	}
	if full.UID != g.UID {
		return nil, fmt.Errorf("get policy %s: created again (uid %s, the cache shows %s): looking again", g.Name, full.UID, g.UID)
	}
	r.reads.remember(&full)
	r.keepIfCached(ctx, g.Name, g.UID)
	return &full, nil
}

// keepIfCached drops what this process just noted of the policy name's
// incarnation uid, read from the API server, if the cache no longer
// shows that incarnation: deleted between the read and the note, its
// deletion event (forgetDeleted) has passed already, and the note would
// stay in memory for good. The cache takes a deletion in before its
// event is handled, so a note the cache still shows the policy of is
// dropped by that event.
func (r *Reconciler) keepIfCached(ctx context.Context, name string, uid types.UID) {
	m := policymeta.Object(name)
	err := r.Client.Get(ctx, types.NamespacedName{Name: name}, m)
	if apierrors.IsNotFound(err) || err == nil && m.UID != uid {
		r.reads.forgetIncarnation(name, uid)
	}
}

// desiredOf returns the desired state of the generated policy g.
func (r *Reconciler) desiredOf(ctx context.Context, g *metav1.PartialObjectMetadata) ([]byte, error) {
	spec, err := r.specOf(ctx, g)
	if err != nil {
		return nil, err
	}
	return spec.DesiredState.Raw, nil
}

// unhandled reports whether kubernetes-nmstate's handler says the
// generated policy of node matches no node it runs on (its status:
// NoMatchingNode, no handler pod on the node). It is asked only for a
// node without an enactment of the policy's generation, or whose
// enactment of it progresses (its handler may have gone mid-apply): one
// whose enactment of it is done is where that says. The status is read
// from the API server at most every handledTTL per policy (progressPoll
// while it progresses), less often as the wait lasts (handledRead.stands);
// a read that fails says handled, and a later pass reads again.
func (r *Reconciler) unhandled(ctx context.Context, w *world, node string) bool {
	g := w.generated[node]
	if g == nil {
		return false
	}
	ttl, waiting := handledTTL, true
	if e := w.enactmentOf(node); enactedAt(e, g.Generation) {
		if policystatus.StateOf(e, g.Generation) != policystatus.Progressing {
			return false
		}
		ttl, waiting = progressPoll, false
	}
	now := r.Clock.Now()
	since := now
	if v, ok := r.reads.handled.Load(g.Name); ok {
		h := v.(handledRead)
		if h.stands(g, ttl, waiting, now) {
			return h.unhandled
		}
		if h.uid == g.UID && h.generation == g.Generation {
			since = h.since
		}
	}
	full, err := r.readPolicy(ctx, g)
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("could not read whether kubernetes-nmstate's handler runs on the node", "policy", g.Name, "error", err.Error())
		return false
	}
	h := handledRead{uid: full.UID, generation: g.Generation, since: since, at: now, waiting: waiting, unhandled: matchesNoNode(full)}
	r.reads.handled.Store(g.Name, h)
	r.keepIfCached(ctx, g.Name, g.UID)
	return h.unhandled
}

// matchesNoNode reports whether kubernetes-nmstate's handler says the
// policy matches no node it runs on.
func matchesNoNode(g *nmstatev1.NodeNetworkConfigurationPolicy) bool {
	for _, c := range g.Status.Conditions {
		if c.Status == corev1.ConditionTrue && c.Reason == shared.NodeNetworkConfigurationPolicyConditionConfigurationNoMatchingNode {
			return true
		}
	}
	return false
}

// same reports whether the generated policy have (its metadata) has the
// spec and annotations of want. A spec that cannot be read is not the
// same: the write that follows says why.
func (r *Reconciler) same(ctx context.Context, have *metav1.PartialObjectMetadata, want *nmstatev1.NodeNetworkConfigurationPolicy) bool {
	if isRemoval(have) != isRemoval(want) || releaseAttempt(have) != releaseAttempt(want) {
		return false
	}
	spec, err := r.specOf(ctx, have)
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("could not read the spec of a generated policy", "policy", have.Name, "error", err.Error())
		return false
	}
	return sameSpec(spec, &want.Spec)
}

// sameSpec reports whether two specs of a generated policy say the same.
func sameSpec(have, want *shared.NodeNetworkConfigurationPolicySpec) bool {
	if !reflect.DeepEqual(have.NodeSelector, want.NodeSelector) || !reflect.DeepEqual(nilIfEmpty(have.Capture), nilIfEmpty(want.Capture)) ||
		!reflect.DeepEqual(have.MaxUnavailable, want.MaxUnavailable) {
		return false
	}
	if bytes.Equal(have.DesiredState.Raw, want.DesiredState.Raw) {
		return true // both in the canonical form of a JSON-to-YAML conversion
	}
	var a, b any
	_ = yaml.Unmarshal(have.DesiredState.Raw, &a)
	_ = yaml.Unmarshal(want.DesiredState.Raw, &b)
	return reflect.DeepEqual(a, b)
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}
