package nodes

import (
	"context"
	"fmt"
	"io"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// Backend runs the nodes of a local cluster: simulated nodes, each a
// Node object and a handler process with a simulated network (ours or
// kubernetes-nmstate's handler, see handlers.Handler), or real nodes, each
// a kubelet with its own containerd and network namespace.
//
// For one node the calls come in this order: Add; then, while it runs,
// any number of Restart, Signal (stall and resume alternate) and Power
// (off and on alternate, off first); then Remove. After Remove, Add may
// come again under the same name: a new machine, which starts with a
// network of its own. Every call returns once what it did is done (a
// handler ready, a node's enactments gone), and writes one line per step
// to out.
type Backend interface {
	Add(ctx context.Context, k client.Client, name string, labels map[string]string, out io.Writer) error
	Remove(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error
	Restart(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error
	// Signal stalls the node's handler (SIGSTOP), as a GC pause or a
	// paused VM would, or resumes it (SIGCONT): verb is "stall" or
	// "resume".
	Signal(ctx context.Context, k client.Client, name, verb string, out io.Writer) error
	// Power stops the node's machine (on false), as a power-off does, or
	// starts it again (on true).
	Power(ctx context.Context, k client.Client, name string, on bool, out io.Writer) error
}

// For returns the backend of the cluster's nodes.
func For(s *state.Cluster) Backend {
	c := &cluster{s}
	if c.Real != nil {
		return realNodes{c}
	}
	return simulatedNodes{c}
}

// realNodes are kubelets: their handler is a pod of the install, so the
// commands that drive a handler process (restart, stall, resume) and
// power a simulated machine (stop, start) are refused, saying what to do
// instead.
type realNodes struct{ c *cluster }

func (r realNodes) Add(ctx context.Context, k client.Client, name string, labels map[string]string, out io.Writer) error {
	start := time.Now()
	if err := r.c.addRealNode(ctx, k, name, labels, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "added node %s in %.0fs; the handler DaemonSet runs a pod on it\n", name, time.Since(start).Seconds())
	return nil
}

func (r realNodes) Remove(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error {
	if err := r.c.added(name); err != nil {
		return err
	}
	return r.c.removeRealNode(ctx, k, name, crash, out)
}

func (r realNodes) Restart(ctx context.Context, k client.Client, name string, _ bool, _ io.Writer) error {
	return r.c.handlerIsAPod(ctx, k, name, "restart")
}

func (r realNodes) Signal(ctx context.Context, k client.Client, name, verb string, _ io.Writer) error {
	return r.c.handlerIsAPod(ctx, k, name, verb)
}

func (r realNodes) Power(_ context.Context, _ client.Client, name string, on bool, _ io.Writer) error {
	if err := r.c.added(name); err != nil {
		return err
	}
	verb := map[bool]string{true: "start", false: "stop"}[on]
	return fmt.Errorf("node %s: node %s powers a simulated node's machine off or on; a real node is removed (node remove --crash) and added again", name, verb)
}

// simulatedNodes are Node objects the local cluster marks Ready, with a
// handler process each (handlers.For(c.Cluster)) and a simulated network each.
type simulatedNodes struct{ c *cluster }

func (s simulatedNodes) Add(ctx context.Context, k client.Client, name string, labels map[string]string, out io.Writer) error {
	if err := s.c.addNode(ctx, k, name, labels); err != nil {
		return err
	}
	fmt.Fprintf(out, "added node %s; its handler runs (pid %d)\n", name, s.c.Processes[state.HandlerName(name)].PID)
	return nil
}

func (s simulatedNodes) Remove(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error {
	return s.c.removeNode(ctx, k, name, crash, out)
}

func (s simulatedNodes) Restart(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error {
	if err := s.c.restartHandler(ctx, k, name, crash); err != nil {
		return err
	}
	fmt.Fprintf(out, "restarted the handler of %s (pid %d)\n", name, s.c.Processes[state.HandlerName(name)].PID)
	return nil
}

func (s simulatedNodes) Power(ctx context.Context, k client.Client, name string, on bool, out io.Writer) error {
	return s.c.power(ctx, k, name, on, out)
}

func (s simulatedNodes) Signal(_ context.Context, _ client.Client, name, verb string, out io.Writer) error {
	return s.c.signalHandler(name, verb, out)
}

// MaxSimulated bounds up --nodes: each simulated node is a handler
// process of some 35 to 55 MB resident, most of it the pages of its
// binary, which every handler of a machine shares (ours: about 9 MB its
// own).
const MaxSimulated = 500
