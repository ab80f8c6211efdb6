package companion_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// upstream plays kubernetes-nmstate's handler for the generated NNCPs, on
// simulated networks (nmstatectl-sim): for each NNCP of a node it knows,
// whose enactment "<node>.<nncp>" has not reached the NNCP's generation,
// it applies the desired state, publishes the node's NodeNetworkState and
// marks the enactment Available at that generation (Failing on a node
// told to fail); it deletes the enactment of an NNCP that is gone. With
// hold set it applies nothing and leaves each such enactment Progressing:
// a test lets the nodes finish one by one (finish). The real handler runs
// in test/peer.
type upstream struct {
	t     *testing.T
	dir   string
	mu    sync.Mutex
	nodes map[string]*envtest.Node
	fail  map[string]bool
	// down are the nodes whose handler does not run: it writes nothing.
	down map[string]bool
	hold bool
	// refreshed holds, by node, the last refresh request answered;
	// published the last state published.
	refreshed, published map[string]string
	// maxBusy is the most NNCPs seen progressing at once.
	maxBusy int
	// passing serializes the double's passes and finish: a pass counts
	// what is busy at one moment.
	passing sync.Mutex
}

// addNode creates a Node labelled role=label, with an eth1 and no address,
// and its network state.
func (u *upstream) addNode(name, label string) {
	u.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"role": label, "kubernetes.io/hostname": name}}}
	Expect(k.Create(ctx, n)).To(Succeed())
	u.t.Cleanup(func() { removeNode(name) })
	node := envtest.NewNode(name, u.dir, simBin)
	u.mu.Lock()
	u.nodes[name] = node
	u.mu.Unlock()
	Expect(u.publish(name)).To(Succeed())
	u.t.Cleanup(func() {
		_ = k.Delete(ctx, &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
}

// publish writes the node's network state as its simulated network shows
// it, when it changed since it last did: kubernetes-nmstate's handler
// publishes nothing new when nothing changed, even when asked to.
func (u *upstream) publish(name string) error {
	u.mu.Lock()
	node, last := u.nodes[name], u.published[name]
	u.mu.Unlock()
	state, err := node.Network.Show(ctx)
	if err != nil {
		return err
	}
	if last == string(state) {
		return nil
	}
	if err := envtest.PublishState(ctx, k, name, string(state), time.Now()); err != nil {
		return err
	}
	u.mu.Lock()
	u.published[name] = string(state)
	u.mu.Unlock()
	return nil
}

// run starts the double's loop until the test ends.
func (u *upstream) run() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	u.t.Cleanup(func() { close(done); <-stopped })
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if err := u.pass(false); err != nil && ctx.Err() == nil {
				u.t.Logf("upstream double: %v", err)
			}
		}
	}()
}

// finish lets one held node finish: its NNCP is applied.
func (u *upstream) finish(node string) error {
	return u.applyNode(node)
}

// pass looks at every generated NNCP once.
func (u *upstream) pass(force bool) error {
	u.passing.Lock()
	defer u.passing.Unlock()
	var list nmstatev1.NodeNetworkConfigurationPolicyList
	if err := k.List(ctx, &list, client.HasLabels{ippoolv1.PooledPolicyLabel}); err != nil {
		return err
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
		name := shared.EnactmentKey(node, g.Name).Name
		live[name] = true
		if down {
			continue
		}
		e, err := u.enactment(node, g)
		if err != nil {
			return err
		}
		if e.Status.PolicyGeneration == g.Generation && conditions.TrueType(e.Status.Conditions) != "" &&
			conditions.TrueType(e.Status.Conditions) != shared.NodeNetworkConfigurationEnactmentConditionProgressing &&
			!trueSince(e).Before(&g.CreationTimestamp) {
			continue // done; an enactment left from an earlier policy of the name is applied again, as kubernetes-nmstate does
		}
		busy++
		if hold {
			if err := u.setState(e, g.Generation, shared.NodeNetworkConfigurationEnactmentConditionProgressing, "", false); err != nil {
				return err
			}
			continue
		}
		if err := u.apply(node, g, e); err != nil {
			return err
		}
	}
	u.mu.Lock()
	u.maxBusy = max(u.maxBusy, busy)
	u.mu.Unlock()
	if err := u.refresh(); err != nil {
		return err
	}
	var enactments nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := k.List(ctx, &enactments); err != nil {
		return err
	}
	for i := range enactments.Items {
		e := &enactments.Items[i]
		u.mu.Lock()
		_, ours := u.nodes[e.Labels[shared.EnactmentNodeLabel]]
		down := u.down[e.Labels[shared.EnactmentNodeLabel]]
		u.mu.Unlock()
		if ours && !down && !live[e.Name] {
			_ = k.Delete(ctx, e) // the policy is gone: kubernetes-nmstate deletes its enactment
		}
	}
	return nil
}

// refresh publishes again the state of a node whose NodeNetworkState
// carries a new refresh request (ippoolv1.RefreshStateLabel), as
// kubernetes-nmstate's handler does.
func (u *upstream) refresh() error {
	var states nncev1beta1.NodeNetworkStateList
	if err := k.List(ctx, &states); err != nil {
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
		if err := u.publish(nns.Name); err != nil {
			return err
		}
		u.mu.Lock()
		u.refreshed[nns.Name] = asked
		u.mu.Unlock()
	}
	return nil
}

// applyNode applies node's generated NNCPs that have not reached their
// generation.
func (u *upstream) applyNode(node string) error {
	u.passing.Lock()
	defer u.passing.Unlock()
	var list nmstatev1.NodeNetworkConfigurationPolicyList
	if err := k.List(ctx, &list, client.HasLabels{ippoolv1.PooledPolicyLabel}); err != nil {
		return err
	}
	for i := range list.Items {
		g := &list.Items[i]
		if g.Annotations[ippoolv1.PooledNodeAnnotation] != node {
			continue
		}
		e, err := u.enactment(node, g)
		if err != nil {
			return err
		}
		if err := u.apply(node, g, e); err != nil {
			return err
		}
	}
	return nil
}

// enactment returns the enactment of node's NNCP g, created if missing.
func (u *upstream) enactment(node string, g *nmstatev1.NodeNetworkConfigurationPolicy) (*nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{
		Name:   shared.EnactmentKey(node, g.Name).Name,
		Labels: map[string]string{shared.EnactmentNodeLabel: node, shared.EnactmentPolicyLabel: g.Name},
	}}
	err := k.Get(ctx, client.ObjectKeyFromObject(e), e)
	if apierrors.IsNotFound(err) {
		err = k.Create(ctx, e)
	}
	return e, err
}

// apply applies g's desired state on node's network, publishes its state
// and marks the enactment.
func (u *upstream) apply(node string, g *nmstatev1.NodeNetworkConfigurationPolicy, e *nncev1beta1.NodeNetworkConfigurationEnactment) error {
	u.mu.Lock()
	n, fail := u.nodes[node], u.fail[node]
	u.mu.Unlock()
	if fail {
		return u.setState(e, g.Generation, shared.NodeNetworkConfigurationEnactmentConditionFailing,
			shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure, false)
	}
	if err := n.Network.Apply(ctx, g.Spec.DesiredState.Raw); err != nil {
		return fmt.Errorf("apply %s on %s: %w", g.Name, node, err)
	}
	if err := n.Network.Commit(ctx); err != nil {
		return err
	}
	if err := u.publish(node); err != nil {
		return err
	}
	return u.setState(e, g.Generation, shared.NodeNetworkConfigurationEnactmentConditionAvailable,
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
func (u *upstream) setState(e *nncev1beta1.NodeNetworkConfigurationEnactment, generation int64, t shared.ConditionType,
	reason shared.ConditionReason, applied bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(e), e); err != nil {
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
		return k.Status().Update(ctx, e)
	})
}

// set changes what the double does.
func (u *upstream) set(f func(u *upstream)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f(u)
}

// configured returns the addresses node's simulated eth1 carries.
func (u *upstream) configured(node string) func() []string {
	return func() []string {
		u.mu.Lock()
		n := u.nodes[node]
		u.mu.Unlock()
		return n.ConfiguredAll("eth1")
	}
}
