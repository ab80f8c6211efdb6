package envtest

import (
	"context"
	"fmt"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// Victims are another node's objects, and the pool and policy, that a
// node's handler credentials try to change in Attacks.
type Victims struct {
	// Enactment is the other node's enactment, State its NodeNetworkState.
	Enactment *nncev1beta1.NodeNetworkConfigurationEnactment
	State     *nncev1beta1.NodeNetworkState
	Pool      *ippoolv1.NodeIPPool
	Policy    *nmstatev1.NodeNetworkConfigurationPolicy
}

// Attack is one write a node's handler credentials must not make.
type Attack struct {
	Name string
	// Do makes the write with the attacker's client, reading what it needs
	// with the admin's.
	Do func(ctx context.Context, admin, attacker client.Client) error
	// Refusal is what the error must say; Target, if set, must not change.
	Refusal string
	Target  client.Object
}

// Attacker is whose credentials attack: a handler's, on its node.
type Attacker struct {
	// Node is the node the credentials were issued for (their node claim).
	Node string
	// User is the user name they authenticate as, such as
	// system:serviceaccount:nmstate-ippool:nmstate-ippool-handler for the
	// install of deploy/default.
	User string
}

// Attacks returns what the credentials of a node's handler try against v:
// another node's enactment and NodeNetworkState, objects for nodes that do
// not exist, the pool's status, resets.
func Attacks(a Attacker, v Victims) []Attack {
	return append(enactmentAttacks(a.Node, v), stateAndPoolAttacks(a, v)...)
}

// refusals are the beginnings of the messages of a refusal by the
// admission policy and by RBAC.
func refusals(a Attacker) (byPolicy, byRBAC string) {
	return fmt.Sprintf("node %s's credentials", a.Node), fmt.Sprintf("is forbidden: User %q", a.User)
}

// enactmentAttacks are the attacks on another node's enactment, and on
// enactments of nodes that do not exist.
func enactmentAttacks(own string, v Victims) []Attack {
	byPolicy := fmt.Sprintf("node %s's credentials", own)
	other := v.Enactment.Labels[shared.EnactmentNodeLabel]
	ghost := enactmentOf("ghost", "p")
	return []Attack{
		{"set another node's desired state and grant it a slot", func(ctx context.Context, admin, c client.Client) error {
			e, err := fresh(ctx, admin, v.Enactment)
			if err != nil {
				return err
			}
			now := metav1.NowMicro()
			e.Status.DesiredState = shared.NewState("interfaces: [{name: eth0, state: down}]")
			e.Status.Slot = &nncev1beta1.ApplySlot{Requested: now, Granted: &now}
			return c.Status().Update(ctx, e)
		}, byPolicy + " may change only its own enactments, not NodeNetworkConfigurationEnactment " + v.Enactment.Name + " (status) of node " + other, v.Enactment},
		{"drop another node's record by a status patch", func(ctx context.Context, admin, c client.Client) error {
			e, err := fresh(ctx, admin, v.Enactment)
			if err != nil {
				return err
			}
			patch := client.MergeFrom(e.DeepCopy())
			e.Status.IPPool = nil
			return c.Status().Patch(ctx, e, patch)
		}, byPolicy, v.Enactment},
		{"strip another node's finalizer", func(ctx context.Context, admin, c client.Client) error {
			e, err := fresh(ctx, admin, v.Enactment)
			if err != nil {
				return err
			}
			e.Finalizers = nil
			return c.Update(ctx, e)
		}, byPolicy, v.Enactment},
		{"relabel another node's enactment as its own", func(ctx context.Context, admin, c client.Client) error {
			e, err := fresh(ctx, admin, v.Enactment)
			if err != nil {
				return err
			}
			e.Labels[shared.EnactmentNodeLabel] = own
			return c.Update(ctx, e)
		}, byPolicy + " may change only its own enactments, not NodeNetworkConfigurationEnactment " + v.Enactment.Name + " of node " + other, v.Enactment},
		{"ask for a reset of another node's allocations", func(ctx context.Context, admin, c client.Client) error {
			return c.Patch(ctx, v.Enactment.DeepCopy(), client.RawPatch(types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"`+ippoolv1.ResetIPPoolAnnotation+`":"`+v.Pool.Name+`"}}}`)))
		}, byPolicy, v.Enactment},
		{"delete another node's enactment", func(ctx context.Context, _, c client.Client) error {
			return c.Delete(ctx, v.Enactment.DeepCopy())
		}, byPolicy + " may change only its own enactments, not NodeNetworkConfigurationEnactment " + v.Enactment.Name, v.Enactment},
		{"create an enactment for a node that does not exist", func(ctx context.Context, _, c client.Client) error {
			return c.Create(ctx, ghost.DeepCopy())
		}, byPolicy + " may change only its own enactments, not NodeNetworkConfigurationEnactment ghost.p of node ghost", nil},
		{"take the name another node's enactment needs, for a dotted policy that does not exist", func(ctx context.Context, _, c client.Client) error {
			// own.rack2.q is also node own.rack2's enactment of policy q.
			return c.Create(ctx, enactmentOf(own, "rack2.q"))
		}, `is refused: NodeNetworkConfigurationPolicy "rack2.q" does not exist`, nil},
		{"create another node's enactment of a new policy, labelled as its own", func(ctx context.Context, _, c client.Client) error {
			e := enactmentOf(own, "q")
			e.Name = other + ".q"
			return c.Create(ctx, e)
		}, byPolicy + " may change only enactments named " + own + ".<policy>", nil},
	}
}

// stateAndPoolAttacks are the attacks on another node's NodeNetworkState,
// on states of nodes that do not exist, and on the pool and the policy.
func stateAndPoolAttacks(a Attacker, v Victims) []Attack {
	own := a.Node
	byPolicy, byRBAC := refusals(a)
	return []Attack{
		{"forge another node's network state without its addresses", func(ctx context.Context, admin, c client.Client) error {
			s, err := fresh(ctx, admin, v.State)
			if err != nil {
				return err
			}
			s.Status.CurrentState = shared.NewState("interfaces: []")
			s.Status.LastSuccessfulUpdateTime = metav1.Now()
			return c.Status().Update(ctx, s)
		}, byPolicy + " may change only NodeNetworkState " + own + ", not NodeNetworkState " + v.State.Name + " (status)", v.State},
		{"delete another node's network state", func(ctx context.Context, _, c client.Client) error {
			return c.Delete(ctx, v.State.DeepCopy())
		}, byRBAC + ` cannot delete resource "nodenetworkstates"`, v.State},
		{"create a network state for a node that does not exist", func(ctx context.Context, _, c client.Client) error {
			return c.Create(ctx, &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "ghost"}})
		}, byPolicy + " may change only NodeNetworkState " + own + ", not NodeNetworkState ghost", nil},
		{"clear the pool's bitmap and mark it available", func(ctx context.Context, admin, c client.Client) error {
			p, err := fresh(ctx, admin, v.Pool)
			if err != nil {
				return err
			}
			p.Status.AllocatedOffsets = ""
			p.Status.Quarantined, p.Status.InFlight = nil, nil
			return c.Status().Update(ctx, p)
		}, byRBAC + ` cannot update resource "nodeippools/status"`, v.Pool},
		{"ask for a reset of the pool", func(ctx context.Context, _, c client.Client) error {
			return c.Patch(ctx, v.Pool.DeepCopy(), client.RawPatch(types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"`+ippoolv1.ResetIPPoolAnnotation+`":""}}}`)))
		}, byRBAC + ` cannot patch resource "nodeippools"`, v.Pool},
		{"ask for a reset of the policy", func(ctx context.Context, _, c client.Client) error {
			return c.Patch(ctx, v.Policy.DeepCopy(), client.RawPatch(types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"`+ippoolv1.ResetIPPoolAnnotation+`":"`+v.Pool.Name+`"}}}`)))
		}, byRBAC + ` cannot patch resource "nodenetworkconfigurationpolicies"`, v.Policy},
	}
}

// Try makes the attack with the attacker's client and returns what went
// wrong: it was not refused, refused for another reason or without the
// expected message, or its target changed anyway. nil if it was refused
// as it should be.
func (a Attack) Try(ctx context.Context, admin, attacker client.Client) error {
	var before string
	if a.Target != nil {
		t, err := fresh(ctx, admin, a.Target)
		if err != nil {
			return err
		}
		before = t.GetResourceVersion()
	}
	err := a.Do(ctx, admin, attacker)
	switch {
	case err == nil:
		return fmt.Errorf("the attacker could %s", a.Name)
	case !apierrors.IsForbidden(err):
		return fmt.Errorf("%s: refused with %w, want Forbidden", a.Name, err)
	case !strings.Contains(err.Error(), a.Refusal):
		return fmt.Errorf("%s: the refusal says\n  %w\nwant it to say\n  %s", a.Name, err, a.Refusal)
	}
	if a.Target != nil {
		t, err := fresh(ctx, admin, a.Target)
		if err != nil {
			return err
		}
		if after := t.GetResourceVersion(); after != before {
			return fmt.Errorf("%s: %s changed (resourceVersion %s → %s) although the request was refused", a.Name, a.Target.GetName(), before, after)
		}
	}
	return nil
}

// BearerConfig returns cfg authenticating with token instead of its own
// credentials.
func BearerConfig(cfg *rest.Config, token string) *rest.Config {
	out := rest.AnonymousClientConfig(cfg)
	out.BearerToken = token
	return out
}

// EnactmentOf returns the enactment of node and policy as a handler
// creates it, owned by node when node has a UID.
func EnactmentOf(node *corev1.Node, policy string) *nncev1beta1.NodeNetworkConfigurationEnactment {
	e := enactmentOf(node.Name, policy)
	if node.UID != "" {
		e.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
	}
	return e
}

func enactmentOf(node, policy string) *nncev1beta1.NodeNetworkConfigurationEnactment {
	return &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{
		Name:   node + "." + policy,
		Labels: map[string]string{shared.EnactmentNodeLabel: node, shared.EnactmentPolicyLabel: policy},
	}}
}

// fresh reads o again with c.
func fresh[T client.Object](ctx context.Context, c client.Client, o T) (T, error) {
	out := o.DeepCopyObject().(T)
	err := c.Get(ctx, client.ObjectKeyFromObject(o), out)
	return out, err
}
