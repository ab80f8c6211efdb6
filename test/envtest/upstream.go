package envtest

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
)

// Upstream plays kubernetes-nmstate's handler for the policies the
// companion controller generates, on simulated networks (nmstatectl-sim):
// for each generated NNCP of a node it knows, whose enactment
// "<node>.<nncp>" has not reached the NNCP's generation, it applies the
// desired state, publishes the node's NodeNetworkState and marks the
// enactment Available at that generation (Failing on a node told to fail);
// it deletes the enactment of an NNCP that is gone, and publishes the
// state again when asked to refresh it. Held, it applies nothing and
// leaves each such enactment Progressing: a test lets the nodes finish one
// by one (Finish). The real handler runs in test/peer.
type Upstream struct {
	t   testing.TB
	c   client.Client
	dir string
	sim string
	mu  sync.Mutex
	// nodes are the simulated machines, by name; fail the nodes told to
	// fail; down those whose handler does not run (it writes nothing).
	nodes      map[string]*Node
	fail, down map[string]bool
	hold       bool
	// refreshed holds, by node, the last refresh request answered;
	// published the last state published.
	refreshed, published map[string]string
	// maxBusy is the most NNCPs seen progressing at once.
	maxBusy int
	// passing serializes the double's passes and Finish: a pass counts
	// what is busy at one moment.
	passing sync.Mutex
}

// NewUpstream returns the double, acting with c, its nodes' networks in a
// directory of the test's, configured by the simulator binary sim. Run
// starts it.
func NewUpstream(t testing.TB, c client.Client, sim string) *Upstream {
	return &Upstream{t: t, c: c, dir: t.TempDir(), sim: sim, nodes: map[string]*Node{}, fail: map[string]bool{},
		down: map[string]bool{}, refreshed: map[string]string{}, published: map[string]string{}}
}

// AddNode creates a Node with labels and kubernetes.io/hostname set to its
// name, whose machine has an eth1 and no address, and its network state.
// The test's end removes both (RemoveNode).
func (u *Upstream) AddNode(name string, labels map[string]string) error {
	labels = maps.Clone(labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[corev1.LabelHostname] = name
	ctx := context.Background()
	if err := u.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
		return err
	}
	node := NewNode(name, u.dir, u.sim)
	u.mu.Lock()
	u.nodes[name] = node
	u.mu.Unlock()
	u.t.Cleanup(func() {
		// Forgotten first, between two passes, the node's objects are not
		// written again by a loop that still runs.
		u.passing.Lock()
		defer u.passing.Unlock()
		u.mu.Lock()
		delete(u.nodes, name)
		u.mu.Unlock()
		_ = RemoveNode(ctx, u.c, name)
		_ = u.c.Delete(ctx, &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	return u.Publish(name)
}

// RemoveNode deletes a Node for good, without the finalizers a controller
// may have left on it (a test's controller may stop first).
func RemoveNode(ctx context.Context, c client.Client, name string) error {
	if err := c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreNotFound(err) != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := c.Get(ctx, types.NamespacedName{Name: name}, &n); err != nil {
			return client.IgnoreNotFound(err)
		}
		n.Finalizers = nil
		return client.IgnoreNotFound(c.Update(ctx, &n))
	})
}

// Node returns the simulated machine of the node named name, or nil.
func (u *Upstream) Node(name string) *Node {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.nodes[name]
}

// Hold stops the double applying anything (true), or lets it go on.
func (u *Upstream) Hold(hold bool) { u.set(func() { u.hold = hold }) }

// Fail has node's applies fail (true), or succeed again.
func (u *Upstream) Fail(node string, fail bool) { u.set(func() { u.fail[node] = fail }) }

// Down stops node's handler (true: it writes nothing), or starts it again.
func (u *Upstream) Down(node string, down bool) { u.set(func() { u.down[node] = down }) }

// MaxBusy returns the most generated policies seen progressing at once.
func (u *Upstream) MaxBusy() (n int) {
	u.set(func() { n = u.maxBusy })
	return n
}

func (u *Upstream) set(f func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f()
}

// Configured returns the addresses node's simulated eth1 carries.
func (u *Upstream) Configured(node string) func() []string {
	return func() []string { return u.Node(node).ConfiguredAll("eth1") }
}

// Publish writes the node's network state as its simulated network shows
// it, when it changed since it last did: kubernetes-nmstate's handler
// publishes nothing new when nothing changed, even when asked to.
func (u *Upstream) Publish(name string) error {
	u.mu.Lock()
	node, last := u.nodes[name], u.published[name]
	u.mu.Unlock()
	ctx := context.Background()
	state, err := node.Network.Show(ctx)
	if err != nil {
		return err
	}
	if last == string(state) {
		return nil
	}
	if err := PublishState(ctx, u.c, name, string(state), time.Now()); err != nil {
		return err
	}
	u.mu.Lock()
	u.published[name] = string(state)
	u.mu.Unlock()
	return nil
}

// Run starts the double's loop, a pass every 50ms, until the test ends.
func (u *Upstream) Run() {
	Every(u.t, 50*time.Millisecond, func() {
		if err := u.Pass(false); err != nil {
			u.t.Logf("upstream double: %v", err)
		}
	})
}

// Finish lets one held node finish: its generated NNCPs are applied.
func (u *Upstream) Finish(node string) error {
	u.passing.Lock()
	defer u.passing.Unlock()
	ctx := context.Background()
	list, err := u.generated(ctx)
	if err != nil {
		return err
	}
	for i := range list.Items {
		g := &list.Items[i]
		if g.Annotations[ippoolv1.PooledNodeAnnotation] != node {
			continue
		}
		e, err := u.enactment(ctx, node, g)
		if err != nil {
			return err
		}
		if err := u.apply(ctx, node, g, e); err != nil {
			return err
		}
	}
	return nil
}

// generated lists the policies the companion controller generated.
func (u *Upstream) generated(ctx context.Context) (*nmstatev1.NodeNetworkConfigurationPolicyList, error) {
	var list nmstatev1.NodeNetworkConfigurationPolicyList
	err := u.c.List(ctx, &list, client.HasLabels{ippoolv1.PooledPolicyLabel})
	return &list, err
}

// Pass looks at every generated NNCP once; force applies even while held.
func (u *Upstream) Pass(force bool) error {
	u.passing.Lock()
	defer u.passing.Unlock()
	ctx := context.Background()
	live, err := u.applyAll(ctx, force)
	if err != nil {
		return err
	}
	if err := u.refresh(ctx); err != nil {
		return err
	}
	return u.deleteGone(ctx, live)
}

// applyAll applies, or while held marks Progressing, every generated NNCP
// of a running node whose enactment has not reached it, and returns the
// enactments of every generated NNCP of a known node.
func (u *Upstream) applyAll(ctx context.Context, force bool) (map[string]bool, error) {
	list, err := u.generated(ctx)
	if err != nil {
		return nil, err
	}
	busy := 0
	live := map[string]bool{}
	for i := range list.Items {
		g := &list.Items[i]
		node := g.Annotations[ippoolv1.PooledNodeAnnotation]
		u.mu.Lock()
		_, known := u.nodes[node]
		hold, down := u.hold && !force, u.down[node]
		u.mu.Unlock()
		if !known {
			continue
		}
		live[shared.EnactmentKey(node, g.Name).Name] = true
		if down {
			continue
		}
		e, err := u.enactment(ctx, node, g)
		if err != nil {
			return nil, err
		}
		if applied(e, g) {
			continue
		}
		busy++
		if hold {
			err = u.setState(ctx, e, g.Generation, shared.NodeNetworkConfigurationEnactmentConditionProgressing, "", false)
		} else {
			err = u.apply(ctx, node, g, e)
		}
		if err != nil {
			return nil, err
		}
	}
	u.mu.Lock()
	u.maxBusy = max(u.maxBusy, busy)
	u.mu.Unlock()
	return live, nil
}

// applied reports whether the enactment e is done with g at its
// generation; an enactment left from an earlier policy of the name is
// applied again, as kubernetes-nmstate does.
func applied(e *nncev1beta1.NodeNetworkConfigurationEnactment, g *nmstatev1.NodeNetworkConfigurationPolicy) bool {
	t := conditions.TrueType(e.Status.Conditions)
	return e.Status.PolicyGeneration == g.Generation && t != "" && t != shared.NodeNetworkConfigurationEnactmentConditionProgressing &&
		!trueSince(e).Before(&g.CreationTimestamp)
}

// deleteGone deletes the enactments of a running known node that are not
// live: their policy is gone, and kubernetes-nmstate deletes them.
func (u *Upstream) deleteGone(ctx context.Context, live map[string]bool) error {
	var enactments nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := u.c.List(ctx, &enactments); err != nil {
		return err
	}
	for i := range enactments.Items {
		e := &enactments.Items[i]
		u.mu.Lock()
		_, ours := u.nodes[e.Labels[shared.EnactmentNodeLabel]]
		down := u.down[e.Labels[shared.EnactmentNodeLabel]]
		u.mu.Unlock()
		if ours && !down && !live[e.Name] {
			_ = u.c.Delete(ctx, e)
		}
	}
	return nil
}

// refresh publishes again the state of a node whose NodeNetworkState
// carries a new refresh request (ippoolv1.RefreshStateLabel), as
// kubernetes-nmstate's handler does.
func (u *Upstream) refresh(ctx context.Context) error {
	var states nncev1beta1.NodeNetworkStateList
	if err := u.c.List(ctx, &states); err != nil {
		return err
	}
	for _, nns := range states.Items {
		u.mu.Lock()
		_, ours := u.nodes[nns.Name]
		asked, seen := nns.Labels[ippoolv1.RefreshStateLabel], u.refreshed[nns.Name]
		u.mu.Unlock()
		if !ours || asked == "" || asked == seen {
			continue
		}
		if err := u.Publish(nns.Name); err != nil {
			return err
		}
		u.mu.Lock()
		u.refreshed[nns.Name] = asked
		u.mu.Unlock()
	}
	return nil
}

// enactment returns the enactment of node's NNCP g, created if missing.
func (u *Upstream) enactment(ctx context.Context, node string, g *nmstatev1.NodeNetworkConfigurationPolicy) (*nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{
		Name:   shared.EnactmentKey(node, g.Name).Name,
		Labels: map[string]string{shared.EnactmentNodeLabel: node, shared.EnactmentPolicyLabel: g.Name},
	}}
	err := u.c.Get(ctx, client.ObjectKeyFromObject(e), e)
	if apierrors.IsNotFound(err) {
		err = u.c.Create(ctx, e)
	}
	return e, err
}

// apply applies g's desired state on node's network, publishes its state
// and marks the enactment.
func (u *Upstream) apply(ctx context.Context, node string, g *nmstatev1.NodeNetworkConfigurationPolicy, e *nncev1beta1.NodeNetworkConfigurationEnactment) error {
	u.mu.Lock()
	n, fail := u.nodes[node], u.fail[node]
	u.mu.Unlock()
	if fail {
		return u.setState(ctx, e, g.Generation, shared.NodeNetworkConfigurationEnactmentConditionFailing,
			shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure, false)
	}
	if err := n.Network.Apply(ctx, g.Spec.DesiredState.Raw); err != nil {
		return fmt.Errorf("apply %s on %s: %w", g.Name, node, err)
	}
	if err := n.Network.Commit(ctx); err != nil {
		return err
	}
	if err := u.Publish(node); err != nil {
		return err
	}
	return u.setState(ctx, e, g.Generation, shared.NodeNetworkConfigurationEnactmentConditionAvailable,
		shared.NodeNetworkConfigurationEnactmentConditionSuccessfullyConfigured, true)
}

// trueSince returns when the enactment's True condition became True.
func trueSince(e *nncev1beta1.NodeNetworkConfigurationEnactment) *metav1.Time {
	for _, c := range e.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			return &c.LastTransitionTime
		}
	}
	return &metav1.Time{}
}

// setState writes the enactment's conditions at generation; applied marks
// a new apply, whose condition is a new transition even when its type is
// the one the enactment shows.
func (u *Upstream) setState(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment, generation int64,
	t shared.ConditionType, reason shared.ConditionReason, applied bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := u.c.Get(ctx, client.ObjectKeyFromObject(e), e); err != nil {
			return err
		}
		if e.Status.PolicyGeneration == generation && conditions.TrueType(e.Status.Conditions) == t && !applied {
			return nil
		}
		old := e.Status.Conditions
		if applied {
			old = nil // a new transition: kubernetes-nmstate's handler goes through Progressing first
		}
		e.Status.PolicyGeneration = generation
		e.Status.Conditions = conditions.OneTrue(old, shared.NodeNetworkConfigurationEnactmentConditionTypes[:], t, reason, "", time.Now())
		return u.c.Status().Update(ctx, e)
	})
}
