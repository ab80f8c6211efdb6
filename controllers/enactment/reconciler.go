package enactment

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/retire"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/annotations"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/nodemeta"
)

// Reconciler retires enactments: those being deleted (their handler, or
// the admin, deleted them), those of deleted Nodes and, after deleting
// them, those of deleted policies. It is the one retirer: it quarantines
// the addresses of many enactments in shared pool writes, where a thousand
// handlers releasing at once would race for each pool. It also refuses
// reset annotations that name no pool. Set every exported field; New sets
// them from a manager with defaults.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server: a node or a policy is gone only
	// if the API server says so.
	APIReader client.Reader
	// Pools retires enactments and releases their addresses.
	Pools *poolwrite.Writer
	// Recorder emits Events.
	Recorder events.EventRecorder
}

// Reconcile looks at one enactment: its reset annotation and its policy's,
// then whether its node, its policy and its handler are still there.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("enactment", req.Name))
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := r.Client.Get(ctx, req.NamespacedName, &e); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if err := r.checkResets(ctx, &e); err != nil {
		return ctrl.Result{}, err
	}
	fate, err := r.judge(ctx, &e)
	if err != nil {
		return ctrl.Result{}, err
	}
	switch fate.kind {
	case retireNow:
		return ctrl.Result{}, r.retire(ctx, &e, fate.why)
	case deleteNow:
		// Its deletion brings it back, to be retired.
		return ctrl.Result{}, r.delete(ctx, &e, fate.why)
	}
	if len(retire.Releasing(&e)) > 0 {
		return ctrl.Result{}, r.release(ctx, &e)
	}
	return ctrl.Result{}, nil
}

// fateKind is what the controller does with an enactment.
type fateKind int

const (
	// keep: its handler looks after it (the zero fate).
	_ fateKind = iota
	// retireNow: release its addresses and let it go.
	retireNow
	// deleteNow: its policy is gone; delete it, then retire it.
	deleteNow
)

type fate struct {
	kind fateKind
	why  string
}

// judge decides an enactment's fate from its node and policy on the API
// server.
func (r *Reconciler) judge(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment) (fate, error) {
	node, owner := nodeOf(e)
	if node == "" {
		return fate{}, nil // not a handler's enactment
	}
	if why, err := r.nodeGone(ctx, node, owner); why != "" || err != nil {
		return fate{kind: retireNow, why: why}, err
	}
	if !e.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(e, ippoolv1.FinalizerIPPool) {
			return fate{}, nil
		}
		return fate{kind: retireNow, why: "it was deleted"}, nil
	}
	policy := e.Labels[shared.EnactmentPolicyLabel]
	if policy == "" {
		return fate{}, nil
	}
	gone, err := r.gone(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{}, policy)
	if gone {
		return fate{kind: deleteNow, why: fmt.Sprintf("policy %s was deleted", policy)}, err
	}
	return fate{}, err
}

// nodeOf returns the node an enactment belongs to, from its label or its
// owner reference, and the owner reference if it has one.
func nodeOf(e *nncev1beta1.NodeNetworkConfigurationEnactment) (string, *metav1.OwnerReference) {
	var owner *metav1.OwnerReference
	for i := range e.OwnerReferences {
		if ref := &e.OwnerReferences[i]; ref.Kind == "Node" && ref.APIVersion == "v1" {
			owner = ref
		}
	}
	if node := e.Labels[shared.EnactmentNodeLabel]; node != "" {
		return node, owner
	}
	if owner != nil {
		return owner.Name, owner
	}
	return "", nil
}

// nodeGone says why the enactment's node is gone, or "" if it is there.
func (r *Reconciler) nodeGone(ctx context.Context, name string, owner *metav1.OwnerReference) (string, error) {
	if n, err := nodemeta.Get(ctx, r.Client, name); err == nil && (owner == nil || owner.UID == n.UID) {
		return "", nil
	}
	n, err := nodemeta.Get(ctx, r.APIReader, name)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("node %s was deleted", name), nil
	case err != nil:
		return "", err
	case owner != nil && owner.UID != n.UID:
		return fmt.Sprintf("node %s was deleted and re-created", name), nil
	}
	return "", nil
}

// gone reports whether an object is missing, confirming a miss of the
// cache on the API server.
func (r *Reconciler) gone(ctx context.Context, o client.Object, name string) (bool, error) {
	key := types.NamespacedName{Name: name}
	if err := r.Client.Get(ctx, key, o); !apierrors.IsNotFound(err) {
		return false, client.IgnoreNotFound(err)
	}
	switch err := r.APIReader.Get(ctx, key, o); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("get %s: %w", name, err)
	}
	return false, nil
}

// retire retires the enactment and tells of the addresses it released.
func (r *Reconciler) retire(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment, why string) error {
	released, err := retire.Retire(ctx, r.Pools, e)
	if err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("retired enactment", "reason", why, "released", released)
	r.Recorder.Eventf(e, nil, corev1.EventTypeNormal, ippoolv1.ReasonEnactmentRetired, "Retire",
		"Retired: %s; quarantined %s", why, describeReleased(released))
	for _, pool := range slices.Sorted(maps.Keys(released)) {
		p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}}
		r.Recorder.Eventf(p, e, corev1.EventTypeNormal, ippoolv1.ReasonEnactmentRetired, "Release",
			"Quarantined %s held by enactment %s until node %s no longer carries them: %s", strings.Join(released[pool].Allocated, ", "), e.Name, e.Labels[shared.EnactmentNodeLabel], why)
	}
	return nil
}

// release takes back the addresses the enactment asks to release (a
// capture its policy dropped, an address its pool no longer hands out),
// and tells of them.
func (r *Reconciler) release(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment) error {
	released, err := retire.Release(ctx, r.Pools, e.Name)
	if err != nil || len(released) == 0 {
		return err
	}
	node := e.Labels[shared.EnactmentNodeLabel]
	ctrl.LoggerFrom(ctx).Info("released addresses the enactment no longer uses", "released", released)
	for _, pool := range slices.Sorted(maps.Keys(released)) {
		ips := strings.Join(released[pool].Held(), ", ")
		p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}}
		r.Recorder.Eventf(e, p, corev1.EventTypeNormal, ippoolv1.ReasonAddressQuarantined, "Release",
			"Quarantined %s of NodeIPPool %s, which enactment %s no longer uses, until node %s no longer carries them", ips, pool, e.Name, node)
	}
	return nil
}

// describeReleased lists released addresses by pool, or says there were
// none to release here (another retirer released them, or none were held).
func describeReleased(released ippoolv1.EnactmentIPPools) string {
	if len(released) == 0 {
		return "no address (none held, or released by its handler)"
	}
	parts := make([]string, 0, len(released))
	for _, pool := range slices.Sorted(maps.Keys(released)) {
		parts = append(parts, fmt.Sprintf("%s of NodeIPPool %s", strings.Join(released[pool].Allocated, ", "), pool))
	}
	return strings.Join(parts, "; ")
}

// delete deletes the enactment of a deleted policy, as its handler would;
// the controller then retires it.
func (r *Reconciler) delete(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment, why string) error {
	if err := r.Client.Delete(ctx, e, client.Preconditions{UID: &e.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete enactment %q: %w", e.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("deleted enactment", "reason", why)
	r.Recorder.Eventf(e, nil, corev1.EventTypeNormal, ippoolv1.ReasonEnactmentRetired, "Delete",
		"Deleted: %s; its addresses are released next", why)
	return nil
}

// checkResets refuses the reset annotations of the enactment and of its
// policy that name no pool.
func (r *Reconciler) checkResets(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment) error {
	if err := r.checkReset(ctx, e, "nnce"); err != nil {
		return err
	}
	policy := e.Labels[shared.EnactmentPolicyLabel]
	if policy == "" {
		return nil
	}
	var p nmstatev1.NodeNetworkConfigurationPolicy
	if err := r.Client.Get(ctx, types.NamespacedName{Name: policy}, &p); err != nil {
		return client.IgnoreNotFound(err)
	}
	return r.checkReset(ctx, &p, "nncp")
}

// checkReset removes a reset annotation that names no existing pool, with a
// Warning Event that says what to write.
func (r *Reconciler) checkReset(ctx context.Context, o client.Object, kind string) error {
	value, ok := o.GetAnnotations()[ippoolv1.ResetIPPoolAnnotation]
	if !ok {
		return nil
	}
	problem := ""
	if value == "" {
		problem = "is empty"
	} else {
		missing, err := r.gone(ctx, &ippoolv1.NodeIPPool{}, value)
		if err != nil || !missing {
			return err
		}
		problem = fmt.Sprintf("names NodeIPPool %q, which does not exist", value)
	}
	if err := annotations.RemoveAnnotation(ctx, r.Client, o, ippoolv1.ResetIPPoolAnnotation); err != nil {
		return err
	}
	msg := fmt.Sprintf("Ignored and removed the %s annotation: it %s. Name the pool to reset: kubectl annotate %s %s %s=<pool>",
		ippoolv1.ResetIPPoolAnnotation, problem, kind, o.GetName(), ippoolv1.ResetIPPoolAnnotation)
	r.Recorder.Eventf(o, nil, corev1.EventTypeWarning, ippoolv1.ReasonInvalidReset, "Reset", "%s", msg)
	ctrl.LoggerFrom(ctx).Info("refused a reset annotation", "object", o.GetName(), "value", value)
	return nil
}
