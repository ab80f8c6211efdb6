package nodes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/handlers"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// The simulated nodes' kubelets: one process (localcluster kubelets) posts
// for every simulated node that runs what a kubelet posts for the node
// lifecycle controller: its Lease in kube-node-lease, renewed, and a Ready
// condition once it is not. A node whose machine is off (node stop) posts
// nothing, and the node lifecycle controller turns it NotReady after its
// grace period (up --node-grace-period), taints it unreachable, as in a
// cluster.

// BeatInterval is how often the kubelets process renews the nodes'
// Leases: a fifth of the grace period, as a kubelet renews a fourth of
// its Lease's duration, so that a slow round does not make a node
// NotReady.
func BeatInterval(grace time.Duration) time.Duration {
	return max(grace/5, 500*time.Millisecond)
}

// Beat posts one heartbeat of a node, as its kubelet would: its Lease
// renewed (created, owned by the Node, if it has none), and its Ready
// condition True again if it is not. A node without a Node has nothing to
// post.
func Beat(ctx context.Context, k client.Client, node string, grace time.Duration) error {
	var n corev1.Node
	if err := k.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
		return client.IgnoreNotFound(err)
	}
	if err := renewLease(ctx, k, &n, grace); err != nil {
		return err
	}
	if ready(&n) {
		return nil
	}
	now := metav1.Now()
	patch := client.MergeFromWithOptions(n.DeepCopy(), client.MergeFromWithOptimisticLock{})
	setReady(&n, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "simulated by localcluster: the machine runs", LastHeartbeatTime: now, LastTransitionTime: now})
	return k.Status().Patch(ctx, &n, patch)
}

// renewLease renews, or creates, a node's Lease in kube-node-lease.
func renewLease(ctx context.Context, k client.Client, n *corev1.Node, grace time.Duration) error {
	now := metav1.NewMicroTime(time.Now())
	var lease coordinationv1.Lease
	err := k.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: n.Name}, &lease)
	if apierrors.IsNotFound(err) {
		lease = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: n.Name,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.Name),
				LeaseDurationSeconds: ptr.To(int32(grace.Seconds())), RenewTime: &now}}
		return k.Create(ctx, &lease)
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	return k.Update(ctx, &lease)
}

// ready reports whether a Node's Ready condition is True.
func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setReady replaces a Node's Ready condition.
func setReady(n *corev1.Node, cond corev1.NodeCondition) {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i] = cond
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, cond)
}

// Power stops a simulated node's machine (on false: its handler killed,
// its heartbeats stopped, its Node and its network kept, as a machine
// powered off keeps its disk) or starts it again (on true: heartbeats,
// then its handler), and waits until the Node says so: NotReady once the
// node lifecycle controller's grace period has passed, Ready again.
func (c *cluster) power(ctx context.Context, k client.Client, name string, on bool, out io.Writer) error {
	if _, err := c.SimulatedNode(name); err != nil {
		return err
	}
	switch {
	case !c.NodeLifecycle:
		return errors.New("this cluster runs no node lifecycle: start it with 'localcluster up' without --node-lifecycle=false")
	case on != slices.Contains(c.PoweredOff, name):
		return fmt.Errorf("node %s is %s already", name, map[bool]string{true: "running", false: "stopped"}[on])
	}
	grace, err := c.NodeGrace()
	if err != nil {
		return err
	}
	if !on {
		if err := handlers.For(c.Cluster).Stop(ctx, k, name, true); err != nil {
			return err
		}
		c.PoweredOff = append(c.PoweredOff, name)
		if err := c.Save(); err != nil {
			return err
		}
		fmt.Fprintf(out, "stopped the machine of %s: its handler killed, no heartbeat\n", name)
		if !process.WaitFor(grace+time.Minute, func() bool { return nodeNotReady(ctx, k, name) }) {
			return fmt.Errorf("node %s is still Ready %s after its machine stopped; see %s", name, grace+time.Minute, c.Path("logs", "kube-controller-manager.log"))
		}
		fmt.Fprintf(out, "node %s is NotReady\n", name)
		return nil
	}
	c.PoweredOff = slices.DeleteFunc(c.PoweredOff, func(n string) bool { return n == name })
	if err := c.Save(); err != nil {
		return err
	}
	if !process.WaitFor(time.Minute, func() bool { return nodeReady(ctx, k, name) == nil }) {
		return fmt.Errorf("node %s is not Ready a minute after its machine started; see %s", name, c.Path("logs", state.KubeletsName+".log"))
	}
	if err := handlers.For(c.Cluster).Start(ctx, k, name); err != nil {
		return err
	}
	fmt.Fprintf(out, "started the machine of %s: Ready, its handler runs (pid %d)\n", name, c.Processes[state.HandlerName(name)].PID)
	return nil
}

// nodeNotReady reports whether a Node exists and is not Ready.
func nodeNotReady(ctx context.Context, k client.Client, name string) bool {
	var n corev1.Node
	return k.Get(ctx, client.ObjectKey{Name: name}, &n) == nil && !ready(&n)
}
