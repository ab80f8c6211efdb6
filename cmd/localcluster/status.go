package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// status prints the cluster's processes and, per node, the static
// addresses its simulated network carries: what the handlers applied.
func (c *cluster) status(out io.Writer) error {
	fmt.Fprintf(out, "API server %s, kubeconfig %s\n\n", c.APIServer, c.kubeconfig())
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tPID\tSTATE\tLOG")
	for _, name := range c.order() {
		p := c.Processes[name]
		state := "stopped"
		if p.alive() {
			state = "running"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", name, p.PID, state, p.Log)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tINTERFACE\tADDRESSES")
	for _, name := range c.order() {
		node, ok := strings.CutPrefix(name, "handler/")
		if real := c.Real != nil && strings.HasPrefix(name, "kubelet/"); real {
			node, ok = strings.CutPrefix(name, "kubelet/")
		}
		if !ok {
			continue
		}
		state := "stopped"
		switch p := c.Processes[name]; {
		case c.Real != nil && c.Real.Nodes[node] != nil && c.Real.Nodes[node].Removed:
			state = "removed"
		case slices.Contains(c.PoweredOff, node):
			state = "powered off"
		case p.alive():
			state = "running"
		case p.Removed:
			state = "removed"
		}
		stateFile := c.simState(node)
		if c.Real != nil {
			stateFile = filepath.Join(simStateHostDir, node+".yaml")
		}
		ifaces := staticAddresses(stateFile)
		if len(ifaces) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\n", node, state)
		}
		for _, i := range ifaces {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", node, state, i.Name, strings.Join(i.Addresses, ", "))
		}
	}
	return tw.Flush()
}

// staticAddresses reads a simulated node's state and returns its
// interfaces with static addresses, in order.
func staticAddresses(stateFile string) []netstate.InterfaceAddresses {
	raw, err := os.ReadFile(stateFile)
	if err != nil {
		return nil
	}
	ifaces, err := netstate.StaticAddresses(raw)
	if err != nil {
		return nil
	}
	return ifaces
}
