package nodes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/handlers"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// defaultNodeLabels are what every simulated node carries: it is a worker,
// as the samples' policy expects.
func defaultNodeLabels(name string) map[string]string {
	return map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "node-role.kubernetes.io/worker": ""}
}

// addNode creates a Ready Node and starts its handler, with a simulated
// network of its own.
func (c *cluster) addNode(ctx context.Context, k client.Client, name string, labels map[string]string) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("node name %q: %s", name, strings.Join(errs, "; "))
	}
	if c.Processes[state.HandlerName(name)].Alive() {
		return fmt.Errorf("node %s already has a running handler", name)
	}
	if old, ok := c.Processes[state.HandlerName(name)]; ok && old.Removed {
		// A node added again under the name of a removed one is a new
		// machine: it starts with an empty network.
		if err := os.Remove(c.SimState(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := register(ctx, k, name, labels); err != nil {
		return err
	}
	return handlers.For(c.Cluster).Start(ctx, k, name)
}

// register creates a node's Node, with the default labels and labels, and
// marks it Ready, as a kubelet registers its node.
func register(ctx context.Context, k client.Client, name string, labels map[string]string) error {
	all := defaultNodeLabels(name)
	maps.Copy(all, labels)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all}}
	if err := k.Create(ctx, node); err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	// A patch: the kubelets process may have marked it Ready already.
	patch := client.MergeFrom(node.DeepCopy())
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", Message: "simulated by localcluster", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := k.Status().Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("mark node %s Ready: %w", name, err)
	}
	return nil
}

// removeNode deletes a node. Gracefully, the Node goes first while its
// handler runs, and the handler is stopped once the node's enactments are
// gone; with crash, the handler is killed first, without a chance to clean
// up, and the pool controller frees the node's addresses.
func (c *cluster) removeNode(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error {
	h, err := c.SimulatedNode(name)
	if err != nil {
		return err
	}
	h.Removed = true
	if off := slices.Contains(c.PoweredOff, name); off {
		// Its machine is off: nothing on it takes an address off, as
		// after a crash; the Node is tainted out of service.
		c.PoweredOff = slices.DeleteFunc(c.PoweredOff, func(n string) bool { return n == name })
		crash = true
	}
	handler := handlers.For(c.Cluster)
	if crash {
		if err := handler.Stop(ctx, k, name, true); err != nil {
			return err
		}
		fmt.Fprintf(out, "killed the handler of %s (pid %d)\n", name, h.PID)
	}
	if err := deleteNode(ctx, k, name, crash, out); err != nil {
		return err
	}
	if err := handler.Gone(ctx, k, name); err != nil {
		return err
	}
	gone := process.WaitFor(2*time.Minute, func() bool { return enactmentsOf(ctx, k, name) == 0 })
	if !crash {
		if err := handler.Stop(ctx, k, name, false); err != nil {
			return err
		}
		fmt.Fprintf(out, "stopped the handler of %s\n", name)
	}
	if !gone {
		return fmt.Errorf("the enactments of node %s are still there after two minutes; see %s", name, c.Path("logs", "pool-controller.log"))
	}
	fmt.Fprintf(out, "the enactments of %s are gone and its addresses released\n", name)
	return nil
}

// deleteNode deletes a Node as an admin does and waits until it is gone:
// in companion mode a finalizer keeps it until kubernetes-nmstate's
// handler on it has taken the addresses of pooled policies off. With
// shutDown its machine is gone for good (its handler killed, or the node
// stopped), and the Node is tainted node.kubernetes.io/out-of-service, as
// an admin says so; a finalizer then lets it go without the handler.
func deleteNode(ctx context.Context, k client.Client, name string, shutDown bool, out io.Writer) error {
	if err := k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	fmt.Fprintf(out, "deleted node %s\n", name)
	exists := func() bool { return !apierrors.IsNotFound(k.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{})) }
	if shutDown && exists() {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var n corev1.Node
			if err := k.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
				return err
			}
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
			return k.Update(ctx, &n)
		})
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("taint node %s out of service: %w", name, err)
		}
		fmt.Fprintf(out, "tainted node %s %s: its machine is shut down\n", name, corev1.TaintNodeOutOfService)
	}
	if !process.WaitFor(2*time.Minute, func() bool { return !exists() }) {
		var n corev1.Node
		_ = k.Get(ctx, client.ObjectKey{Name: name}, &n)
		return fmt.Errorf("node %s is still there after two minutes, held by %v; see the pool controller's log", name, n.Finalizers)
	}
	return nil
}

// enactmentsOf counts a node's enactments; -1 if they cannot be listed.
func enactmentsOf(ctx context.Context, k client.Client, node string) int {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := k.List(ctx, &list, client.MatchingLabels{shared.EnactmentNodeLabel: node}); err != nil {
		return -1
	}
	return len(list.Items)
}

// signalHandler stalls (SIGSTOP) or resumes (SIGCONT) a node's handler.
func (c *cluster) signalHandler(name, verb string, out io.Writer) error {
	h, ok := c.Processes[state.HandlerName(name)]
	if !ok {
		return fmt.Errorf("node %s was not added by this local cluster", name)
	}
	if err := c.CheckRunning(name); err != nil {
		return err
	}
	sig := syscall.SIGSTOP
	if verb == "resume" {
		sig = syscall.SIGCONT
	}
	if err := h.Signal(sig); err != nil {
		return fmt.Errorf("%s the handler of %s: %w", verb, name, err)
	}
	fmt.Fprintf(out, "%s the handler of %s (pid %d)\n", map[string]string{"stall": "stalled", "resume": "resumed"}[verb], name, h.PID)
	return nil
}

// restartHandler stops a node's handler (killed, with crash) and starts it
// again.
func (c *cluster) restartHandler(ctx context.Context, k client.Client, name string, crash bool) error {
	if _, ok := c.Processes[state.HandlerName(name)]; !ok {
		return fmt.Errorf("node %s was not added by this local cluster", name)
	}
	if err := k.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{}); apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s was removed; add it again instead", name)
	}
	if err := c.CheckRunning(name); err != nil {
		return err
	}
	handler := handlers.For(c.Cluster)
	if err := handler.Stop(ctx, k, name, crash); err != nil {
		return err
	}
	return handler.Start(ctx, k, name)
}
