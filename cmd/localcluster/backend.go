package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// nodeBackend runs the nodes of a local cluster: simulated nodes, each a
// Node object and a handler process with a simulated network (ours or
// kubernetes-nmstate's handler, see nodeHandler), or real nodes, each a
// kubelet with its own containerd and network namespace.
//
// For one node the calls come in this order: add; then, while it runs,
// any number of restart, stall and resume (stall and resume alternate),
// and power (off and on alternate, off first); then remove. After remove, add may come again under the same name: a
// new machine, which starts with a network of its own. Every call returns
// once what it did is done (a handler ready, a node's enactments gone),
// and writes one line per step to out.
type nodeBackend interface {
	add(ctx context.Context, k client.Client, name string, labels map[string]string, out io.Writer) error
	remove(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error
	restart(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error
	// signal stalls the node's handler (SIGSTOP), as a GC pause or a
	// paused VM would, or resumes it (SIGCONT): verb is "stall" or
	// "resume".
	signal(ctx context.Context, k client.Client, name, verb string, out io.Writer) error
	// power stops the node's machine (on false), as a power-off does, or
	// starts it again (on true).
	power(ctx context.Context, k client.Client, name string, on bool, out io.Writer) error
}

// nodes returns the backend of the cluster's nodes.
func (c *cluster) nodes() nodeBackend {
	if c.Real != nil {
		return realNodes{c}
	}
	return simulatedNodes{c}
}

// nodeHandler is the handler program of simulated nodes: ours, or
// kubernetes-nmstate's (up --handler upstream). The calls come in this
// order: prepare, once when the cluster comes up or its nodes switch to
// this handler (localcluster handler use); then, per node, start, which
// returns once the handler serves, and stop, when the node is removed,
// its handler restarted or the nodes switch away; gone, right after a
// removed node's Node is deleted, does what the cluster would do of the
// objects of a deleted Node; retire, last, when the nodes switch to the
// other handler, after every stop.
type nodeHandler interface {
	prepare(ctx context.Context, k client.Client) error
	start(ctx context.Context, k client.Client, node string) error
	stop(ctx context.Context, k client.Client, node string, crash bool) error
	gone(ctx context.Context, k client.Client, node string) error
	retire(ctx context.Context, k client.Client) error
}

// Handler kinds of simulated nodes.
const (
	handlerOurs     = "ours"
	handlerUpstream = "upstream"
)

var handlerKinds = []string{handlerOurs, handlerUpstream}

// handlerTitle names a handler kind in messages.
func handlerTitle(kind string) string {
	if kind == handlerUpstream {
		return "kubernetes-nmstate's handler"
	}
	return "nmstate-ippool's handler"
}

// handler returns the handler of the cluster's simulated nodes.
func (c *cluster) handler() nodeHandler {
	if c.Handler == handlerUpstream {
		return upstreamHandler{c}
	}
	return ourHandler{c}
}

// realNodes are kubelets: their handler is a pod of the install.
type realNodes struct{ c *cluster }

func (r realNodes) add(ctx context.Context, k client.Client, name string, labels map[string]string, out io.Writer) error {
	return r.c.realNode(ctx, k, "add", name, labels, true, false, out)
}

func (r realNodes) remove(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error {
	return r.c.realNode(ctx, k, "remove", name, nil, false, crash, out)
}

func (r realNodes) restart(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error {
	return r.c.realNode(ctx, k, "restart", name, nil, false, crash, out)
}

func (r realNodes) signal(ctx context.Context, k client.Client, name, verb string, out io.Writer) error {
	return r.c.realNode(ctx, k, verb, name, nil, false, false, out)
}

func (r realNodes) power(ctx context.Context, k client.Client, name string, on bool, out io.Writer) error {
	return r.c.realNode(ctx, k, map[bool]string{true: "start", false: "stop"}[on], name, nil, false, false, out)
}

// simulatedNodes are Node objects the local cluster marks Ready, with a
// handler process each (c.handler()) and a simulated network each.
type simulatedNodes struct{ c *cluster }

func (s simulatedNodes) add(ctx context.Context, k client.Client, name string, labels map[string]string, out io.Writer) error {
	if err := s.c.addNode(ctx, k, name, labels); err != nil {
		return err
	}
	fmt.Fprintf(out, "added node %s; its handler runs (pid %d)\n", name, s.c.Processes[handlerName(name)].PID)
	return nil
}

func (s simulatedNodes) remove(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error {
	return s.c.removeNode(ctx, k, name, crash, out)
}

func (s simulatedNodes) restart(ctx context.Context, k client.Client, name string, crash bool, out io.Writer) error {
	if err := s.c.restartHandler(ctx, k, name, crash); err != nil {
		return err
	}
	fmt.Fprintf(out, "restarted the handler of %s (pid %d)\n", name, s.c.Processes[handlerName(name)].PID)
	return nil
}

func (s simulatedNodes) power(ctx context.Context, k client.Client, name string, on bool, out io.Writer) error {
	return s.c.power(ctx, k, name, on, out)
}

func (s simulatedNodes) signal(_ context.Context, _ client.Client, name, verb string, out io.Writer) error {
	return s.c.signalHandler(name, verb, out)
}

// liveNodes returns the simulated nodes whose handler was started and not
// removed, sorted.
func (c *cluster) liveNodes() []string {
	var nodes []string
	for name, p := range c.Processes {
		if node, ok := cutHandlerName(name); ok && !p.Removed {
			nodes = append(nodes, node)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// cutHandlerName returns the node of a handler process's name.
func cutHandlerName(process string) (string, bool) {
	return strings.CutPrefix(process, "handler/")
}

// maxSimulatedNodes bounds up --nodes: each simulated node is a handler
// process of some 30 to 60 MB.
const maxSimulatedNodes = 250
