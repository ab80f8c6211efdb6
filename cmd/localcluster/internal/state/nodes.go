package state

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
)

// Handler kinds of simulated nodes.
const (
	HandlerOurs     = "ours"
	HandlerUpstream = "upstream"
)

// HandlerKinds are the handler kinds, for messages and checks.
var HandlerKinds = []string{HandlerOurs, HandlerUpstream}

// HandlerTitle names a handler kind in messages.
func HandlerTitle(kind string) string {
	if kind == HandlerUpstream {
		return "kubernetes-nmstate's handler"
	}
	return "nmstate-ippool's handler"
}

// LiveNodes returns the simulated nodes whose handler was started and not
// removed, sorted.
func (c *Cluster) LiveNodes() []string {
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
func cutHandlerName(name string) (string, bool) {
	return strings.CutPrefix(name, "handler/")
}

// KubeletsName is the name of the process that posts the simulated nodes'
// heartbeats.
const KubeletsName = "kubelets"

// NodeGrace is the node lifecycle controller's grace period.
func (c *Cluster) NodeGrace() (time.Duration, error) {
	grace, err := time.ParseDuration(c.NodeGracePeriod)
	if err != nil {
		return 0, fmt.Errorf("nodeGracePeriod %q in %s: %w", c.NodeGracePeriod, c.Path(StateFile), err)
	}
	return grace, nil
}

// PoweredOn returns the simulated nodes whose machine runs: added, not
// removed, not stopped.
func (c *Cluster) PoweredOn() []string {
	return slices.DeleteFunc(c.LiveNodes(), func(node string) bool { return slices.Contains(c.PoweredOff, node) })
}

// HandlerName is the name of a simulated node's handler process.
func HandlerName(node string) string { return "handler/" + node }

// SimState is the file of a simulated node's network.
func (c *Cluster) SimState(node string) string { return c.Path("nodes", node+".yaml") }

// SetClockOffset keeps how far a node's handler clock is moved; 0 moves
// it not at all.
func (c *Cluster) SetClockOffset(node string, offset time.Duration) {
	if offset == 0 {
		delete(c.ClockOffsets, node)
		return
	}
	if c.ClockOffsets == nil {
		c.ClockOffsets = map[string]string{}
	}
	c.ClockOffsets[node] = offset.String()
}

// CheckRunning fails for a node whose machine is stopped (node stop).
func (c *Cluster) CheckRunning(name string) error {
	if slices.Contains(c.PoweredOff, name) {
		return fmt.Errorf("the machine of node %s is stopped: start it first (localcluster node start %s)", name, name)
	}
	return nil
}

// SimulatedNode returns the handler process of a simulated node this
// cluster added and did not remove.
func (c *Cluster) SimulatedNode(name string) (*process.Process, error) {
	h, ok := c.Processes[HandlerName(name)]
	switch {
	case !ok:
		return nil, fmt.Errorf("node %s was not added by this local cluster", name)
	case h.Removed:
		return nil, fmt.Errorf("node %s was removed already; add it again with 'localcluster node add %s'", name, name)
	}
	return h, nil
}
