package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// status prints the cluster's processes and, per node, the static
// addresses its simulated network carries: what the handlers applied.
func status(c *state.Cluster, out io.Writer) error {
	fmt.Fprintf(out, "API server %s, kubeconfig %s\n\n", c.APIServer, c.Kubeconfig())
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tPID\tSTATE\tLOG")
	for _, name := range c.Order() {
		p := c.Processes[name]
		status := "stopped"
		if p.Alive() {
			status = "running"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", name, p.PID, status, p.Log)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tINTERFACE\tADDRESSES")
	for _, name := range c.Order() {
		node, ok := strings.CutPrefix(name, "handler/")
		if real := c.Real != nil && strings.HasPrefix(name, "kubelet/"); real {
			node, ok = strings.CutPrefix(name, "kubelet/")
		}
		if !ok {
			continue
		}
		status := "stopped"
		switch p := c.Processes[name]; {
		case c.Real != nil && c.Real.Nodes[node] != nil && c.Real.Nodes[node].Removed:
			status = "removed"
		case slices.Contains(c.PoweredOff, node):
			status = "powered off"
		case p.Alive():
			status = "running"
		case p.Removed:
			status = "removed"
		}
		path := c.SimState(node)
		if c.Real != nil {
			path = filepath.Join(state.SimStateHostDir, node+".yaml")
		}
		ifaces := staticAddresses(path)
		if len(ifaces) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\n", node, status)
		}
		for _, i := range ifaces {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", node, status, i.Name, strings.Join(i.Addresses, ", "))
		}
	}
	return tw.Flush()
}

// staticAddresses reads a simulated node's state and returns its
// interfaces with static addresses, in order.
func staticAddresses(path string) []netstate.InterfaceAddresses {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	ifaces, err := netstate.StaticAddresses(raw)
	if err != nil {
		return nil
	}
	return ifaces
}
