package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/cli"
)

// The simulated nodes' kubelets: one process (localcluster kubelets) posts
// for every simulated node that runs what a kubelet posts for the node
// lifecycle controller: its Lease in kube-node-lease, renewed, and a Ready
// condition once it is not. A node whose machine is off (node stop) posts
// nothing, and the node lifecycle controller turns it NotReady after its
// grace period (up --node-grace-period), taints it unreachable, as in a
// cluster.

// kubeletsName is the name of the process that posts the simulated nodes'
// heartbeats.
const kubeletsName = "kubelets"

// startSimulatedControllers starts, beside simulated nodes, what a
// cluster runs that the local cluster would otherwise lack:
// kube-controller-manager with the garbage collector (dependents deleted
// with their owners, --cascade=foreground and orphan as in a cluster)
// and the node lifecycle controller, with the kubelets process that posts
// the nodes' heartbeats. Its own user may only list and watch: each
// controller acts with its service account's credentials.
func (c *cluster) startSimulatedControllers(ctx context.Context) error {
	if c.Real != nil {
		return nil
	}
	var controllers []string
	if c.GarbageCollector {
		controllers = append(controllers, "garbagecollector")
	}
	if c.NodeLifecycle {
		if err := c.startKubelets(); err != nil {
			return err
		}
		controllers = append(controllers, "nodelifecycle")
	}
	if len(controllers) == 0 {
		return nil
	}
	args := []string{"--controllers=" + strings.Join(controllers, ","), "--use-service-account-credentials=true", "--authentication-skip-lookup"}
	if c.NodeLifecycle {
		args = append(args, "--node-monitor-grace-period="+c.NodeGracePeriod, "--node-monitor-period=1s")
	}
	return c.startKubeComponent(ctx, "kube-controller-manager", args...)
}

// startKubelets starts the process that posts the simulated nodes'
// heartbeats: this program, "localcluster kubelets".
func (c *cluster) startKubelets() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return c.launch(kubeletsName, &process{Binary: exe, Log: c.path("logs", kubeletsName+".log"),
		Args: []string{kubeletsName, "--dir", c.dir}})
}

// beatInterval is how often the kubelets process renews the nodes'
// Leases: a fifth of the grace period, as a kubelet renews a fourth of
// its Lease's duration, so that a slow round does not make a node
// NotReady.
func beatInterval(grace time.Duration) time.Duration {
	return max(grace/5, 500*time.Millisecond)
}

// cmdKubelets runs "kubelets --dir DIR": until the cluster's state is
// gone, it posts, every beat, the heartbeat of every simulated node that
// runs. up starts it; it is not meant to be run by hand.
func cmdKubelets(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(kubeletsName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", ".local", "directory of the cluster")
	if _, err := cli.Parse(fs, args, 0, 0); err != nil {
		return err
	}
	c, err := load(*dir)
	if err != nil {
		return err
	}
	grace, err := c.nodeGrace()
	if err != nil {
		return err
	}
	k, err := c.client()
	if err != nil {
		return err
	}
	tick := time.NewTicker(beatInterval(grace))
	defer tick.Stop()
	for {
		// Read again each beat: node add, stop, start and remove change it.
		if c, err = load(*dir); err != nil {
			return err
		}
		for _, node := range c.poweredOn() {
			if err := beat(ctx, k, node, grace); err != nil {
				fmt.Fprintf(stderr, "%s node %s: %v\n", time.Now().Format(time.RFC3339), node, err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// nodeGrace is the node lifecycle controller's grace period.
func (c *cluster) nodeGrace() (time.Duration, error) {
	grace, err := time.ParseDuration(c.NodeGracePeriod)
	if err != nil {
		return 0, fmt.Errorf("nodeGracePeriod %q in %s: %w", c.NodeGracePeriod, c.path(stateFile), err)
	}
	return grace, nil
}

// poweredOn returns the simulated nodes whose machine runs: added, not
// removed, not stopped.
func (c *cluster) poweredOn() []string {
	return slices.DeleteFunc(c.liveNodes(), func(node string) bool { return slices.Contains(c.PoweredOff, node) })
}

// beat posts one heartbeat of a node, as its kubelet would: its Lease
// renewed (created, owned by the Node, if it has none), and its Ready
// condition True again if it is not. A node without a Node has nothing to
// post.
func beat(ctx context.Context, k client.Client, node string, grace time.Duration) error {
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

// power stops a simulated node's machine (on false: its handler killed,
// its heartbeats stopped, its Node and its network kept, as a machine
// powered off keeps its disk) or starts it again (on true: heartbeats,
// then its handler), and waits until the Node says so: NotReady once the
// node lifecycle controller's grace period has passed, Ready again.
func (c *cluster) power(ctx context.Context, k client.Client, name string, on bool, out io.Writer) error {
	if _, err := c.simulatedNode(name); err != nil {
		return err
	}
	switch {
	case !c.NodeLifecycle:
		return errors.New("this cluster runs no node lifecycle: start it with 'localcluster up' without --node-lifecycle=false")
	case on != slices.Contains(c.PoweredOff, name):
		return fmt.Errorf("node %s is %s already", name, map[bool]string{true: "running", false: "stopped"}[on])
	}
	grace, err := c.nodeGrace()
	if err != nil {
		return err
	}
	if !on {
		if err := c.handler().stop(ctx, k, name, true); err != nil {
			return err
		}
		c.PoweredOff = append(c.PoweredOff, name)
		if err := c.save(); err != nil {
			return err
		}
		fmt.Fprintf(out, "stopped the machine of %s: its handler killed, no heartbeat\n", name)
		if !waitFor(grace+time.Minute, func() bool { return nodeNotReady(ctx, k, name) }) {
			return fmt.Errorf("node %s is still Ready %s after its machine stopped; see %s", name, grace+time.Minute, c.path("logs", "kube-controller-manager.log"))
		}
		fmt.Fprintf(out, "node %s is NotReady\n", name)
		return nil
	}
	c.PoweredOff = slices.DeleteFunc(c.PoweredOff, func(n string) bool { return n == name })
	if err := c.save(); err != nil {
		return err
	}
	if !waitFor(time.Minute, func() bool { return nodeReady(ctx, k, name) == nil }) {
		return fmt.Errorf("node %s is not Ready a minute after its machine started; see %s", name, c.path("logs", kubeletsName+".log"))
	}
	if err := c.handler().start(ctx, k, name); err != nil {
		return err
	}
	fmt.Fprintf(out, "started the machine of %s: Ready, its handler runs (pid %d)\n", name, c.Processes[handlerName(name)].PID)
	return nil
}

// nodeNotReady reports whether a Node exists and is not Ready.
func nodeNotReady(ctx context.Context, k client.Client, name string) bool {
	var n corev1.Node
	return k.Get(ctx, client.ObjectKey{Name: name}, &n) == nil && !ready(&n)
}
